import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging

/// Account linking: the ways one user signs in. A provider account is attached only after its own sign-in
/// (never by matching emails): `POST /auth/link` gives the signed-in CLI a ``LinkTicket`` for the browser flow,
/// and the identity is attached when the code that flow ends in is redeemed (``attachLinked(_:to:)``, at the
/// `authorization_code` grant). An
/// email + password way in is added directly (`{"provider": "custom", "email", "password"}`). The user keeps
/// the id of their first identity whatever is linked or unlinked later.
final class LinkService: ContextualService {
    let accounts: AccountService
    let grants: GrantService
    let signIn: SignInService

    init(accounts: AccountService, grants: GrantService, signIn: SignInService) {
        self.accounts = accounts
        self.grants = grants
        self.signIn = signIn
    }

    var context: ServiceContext { accounts.context }

    /// A provider vouched for someone in a `broker link`'s sign-in (``SignInCallback``): a one-time code at the
    /// CLI's loopback, the identity attached only when the code is redeemed with the CLI's verifier. Refused here
    /// already when the provider account is someone else's, or the session that asked has ended, so the person
    /// sees why in the browser (and the CLI, at its loopback).
    func providerSignedIn(
        _ vouched: VouchedSignIn, request: AuthorizationRequest, link: AuthorizationRequest.LinkTarget,
        browserBound: Bool
    ) async throws -> APIResponse {
        let (record, provider) = (vouched.identity, vouched.provider)
        if request.clientID == AccountPageClient.clientID {
            return try await pageLinkSignedIn(vouched, link: link, browserBound: browserBound)
        }
        guard request.clientID == CLIClient.clientID, CLIClient.isLoopbackRedirect(request.redirectURI) else {
            throw SignInRedirect(reason: "expired", response: Page.response(status: 400, Page.staleAppForm))
        }
        var refusal: (String, String)?
        if try await !tokens.isLive(session: link.session, of: link.user) {
            refusal = ("session_ended", "the session that asked for this link has ended; run broker link again")
        } else {
            refusal = try await linkProblem(record, to: link.user)
        }
        if let (reason, problem) = refusal {
            metrics.link(provider: provider.rawValue, outcome: reason)
            audit.record(
                "linked", outcome: "failure", user: link.user,
                fields: ["provider": provider.rawValue, "reason": reason])
            throw SignInRedirect(
                reason: "link_refused",
                response: .redirect(
                    request.response(
                        [("error", OAuthErrorCode.accessDenied.rawValue), ("error_description", problem)],
                        issuer: issuer)))
        }
        let location = try await AuthorizationCodes(context: context).issue(
            request, user: link.user, signedInWith: provider, authTime: now, browserSession: nil, link: record,
            linkSession: link.session)
        logger.info("link confirmed at the provider", metadata: ["broker.provider": "\(provider)"])
        return .redirect(location)
    }

    /// A link the account page started (its target's session is the browser session that asked): attached at
    /// once — the provider's callback came back to the browser that started it (its binding cookie), while that
    /// browser session stands — then back to the page, which says how it went.
    private func pageLinkSignedIn(_ vouched: VouchedSignIn, link: AuthorizationRequest.LinkTarget, browserBound: Bool)
        async throws -> APIResponse
    {
        let provider = vouched.provider
        let live = try await store.browserSessions(user: link.user).contains {
            $0.id == link.session && $0.revokedAt == nil && $0.expiresAt > now
        }
        guard browserBound, live, let user = try await store.user(id: link.user) else {
            metrics.link(provider: provider.rawValue, outcome: "session_ended")
            throw SignInRedirect(reason: "link_refused", response: AccountPageClient.home(said: .linkFailed))
        }
        if let (reason, _) = try await linkProblem(vouched.identity, to: user.id) {
            metrics.link(provider: provider.rawValue, outcome: reason)
            audit.record(
                "linked", outcome: "failure", user: user.id,
                fields: ["provider": provider.rawValue, "reason": reason, "flow": "account_page"])
            throw SignInRedirect(
                reason: "link_refused",
                response: AccountPageClient.home(said: reason == "provider_taken" ? .linkTaken : .linkOwned))
        }
        do {
            try await attachLinked(vouched.identity, to: user)
        } catch let error as APIError where error.status < 500 {
            throw SignInRedirect(reason: "link_refused", response: AccountPageClient.home(said: .linkOwned))
        }
        return AccountPageClient.home(said: .linked)
    }

    /// `GET /auth/identities`: the signed-in user's ways in, the one their id was made from first.
    /// Reading them changes nothing, so an API access token is enough here (as at `/auth/me`); an account token
    /// is accepted too.
    func identities(authorization: String?) async throws -> APIResponse {
        let user: UserRecord
        do {
            user = try await grants.authenticate(authorization: authorization).user
        } catch let error as APIError where error.status == 401 {
            guard let view = try? await grants.tokens.authenticateAccount(authorization: authorization) else {
                throw error
            }
            user = view.user
        }
        var entries: [(primary: Bool, linkedAt: Int64, value: JSONValue)] = []
        for linked in try await store.identities(user: user.id) {
            let identity = linked.identity
            let primary = identity.derivedUserID == user.id
            entries.append(
                (
                    primary, linked.linkedAt,
                    [
                        "provider": .string(identity.provider.rawValue), "subject": .string(identity.subject),
                        "email": identity.email.map(JSONValue.string) ?? .null,
                        "name": identity.name.map(JSONValue.string) ?? .null,
                        "linked_at": .string(RFC3339.format(epochSeconds: linked.linkedAt)),
                        "primary": .bool(primary),
                    ]
                ))
        }
        if let account = try await store.passwordAccount(user: user.id) {
            let primary = user.id.provider == .custom
            entries.append(
                (
                    primary, primary ? user.createdAt : Int64.max,
                    [
                        "provider": "custom", "email": .string(account.email),
                        "email_verified": .bool(account.emailVerifiedAt != nil), "primary": .bool(primary),
                    ]
                ))
        }
        entries.sort { ($0.primary ? 0 : 1, $0.linkedAt) < ($1.primary ? 0 : 1, $1.linkedAt) }
        return APIResponse(
            status: 200,
            body: ["user_id": .string(user.id.description), "identities": .array(entries.map(\.value))],
            headers: [("Cache-Control", "no-store")])
    }

    /// `POST /auth/link`: `{"provider", "code_challenge"}` for a browser provider (→ a ticket for
    /// `/auth/{provider}/start`), or `{"provider": "custom", "email", "password"}` (→ 201, the password account
    /// added and its verification link mailed).
    ///
    /// Both need an account token (``TokenIssuer/authenticateAccount(authorization:)``): an API access token
    /// alone never adds a way in (RT2-1). The ticket is bound to the session that asked, and dies with it.
    func link(_ input: RequestInput, authorization: String?, address: String?) async throws -> APIResponse {
        let view = try await grants.tokens.authenticateAccount(authorization: authorization)
        let user = view.user
        try await StepUp.requireStrongest(view, authorization: authorization, store: store, now: now)
        let name = try input.string("provider")
        guard let provider = ProviderID(rawValue: name) else {
            throw APIError.invalidRequest("unknown provider \"\(name.prefix(64))\"")
        }
        if provider == .custom { return try await linkPassword(input, user: user, address: address) }
        guard signIn.identityProviders[provider] != nil else {
            throw APIError.notFound("\(signIn.displayName(provider)) is not enabled on this broker")
        }
        guard let challenge = try input.optionalString("code_challenge"), PKCE.isValidS256Challenge(challenge) else {
            throw APIError.invalidRequest("code_challenge must be an S256 challenge (43 base64url characters)")
        }
        if let taken = try await store.identities(user: user.id).first(where: { $0.identity.provider == provider }) {
            throw APIError(
                status: 409, code: .alreadyLinked,
                detail: LinkMessages.providerTaken(
                    signIn.displayName(provider), provider: provider, subject: taken.identity.subject))
        }
        let ticket = try LinkTicket(
            user: user.id, session: view.session.id, codeChallenge: challenge, expiresAt: now + LinkTicket.lifetime
        ).seal(key: signIn.flowKey, provider: provider)
        return APIResponse(
            status: 200,
            body: [
                "provider": .string(provider.rawValue), "link_ticket": .string(ticket),
                "expires_in": .int(LinkTicket.lifetime),
                "authorization_endpoint": .string(signIn.issuer + "/auth/\(provider.rawValue)/start"),
            ],
            headers: [("Cache-Control", "no-store")])
    }

    /// An email and password as a way into `user`'s account (`/auth/link` with `"custom"`, and the account page).
    func linkPassword(_ input: RequestInput, user: UserRecord, address: String?) async throws -> APIResponse {
        guard signIn.configuration.customEnabled else {
            throw APIError.notFound("email and password accounts are not enabled on this broker")
        }
        try accounts.registrations.admit(
            address.map(SourceAddress.network), metrics: metrics, limit: "registrations",
            "too many new accounts from this address; try again later")
        let (email, password) = try AccountService.newCredentials(input)
        if try await store.passwordAccount(user: user.id) != nil { throw Self.alreadyHasPassword }
        let concealed = tokens.configuration.enumerationProtection
        // Under enumeration protection a taken address is not told apart (RT2-7): the same work (the password
        // is hashed either way) and the same 202 as registration; its owner gets the mail that says so.
        // An address someone else added and never confirmed is free to take (RT2-5).
        if !concealed, let held = try await store.passwordAccount(email: email),
            try await !accounts.isUnconfirmedAddition(held)
        {
            throw APIError.accountExists
        }
        let hash = try await accounts.hashPassword(Secret(password))
        if let held = try await store.passwordAccount(email: email), held.user.id != user.id {
            _ = try await accounts.releaseIfUnconfirmedAddition(email: email)
        }
        let outcome = try await store.addPasswordAccount(user: user.id, email: email, passwordHash: hash, now: now)
        if concealed, outcome == .emailTaken {
            metrics.link(provider: "custom", outcome: Self.label(outcome))
            accounts.verification.alreadyRegistered(email: email)
            return AccountService.concealedAnswer
        }
        metrics.link(provider: "custom", outcome: Self.label(outcome))
        switch outcome {
        case .added: break
        case .emailTaken: throw APIError.accountExists
        case .alreadyHasOne: throw Self.alreadyHasPassword
        case .userMissing: throw APIError.invalidToken("the account no longer exists")
        }
        audit.record("linked", user: user.id, fields: ["provider": "custom"])
        logger.info("password way in added", metadata: ["broker.user": "\(user.id)"])
        accounts.verification.registered(user, email: email)
        if concealed { return AccountService.concealedAnswer }
        var body: [String: JSONValue] = [
            "user_id": .string(user.id.description), "provider": "custom", "email": .string(email),
            "status": "linked", "email_verified": false,
        ]
        if accounts.verification.mailer != nil { body["verification"] = "sent" }
        return APIResponse(status: 201, body: .object(body), headers: [("Cache-Control", "no-store")])
    }

    static let alreadyHasPassword = APIError(
        status: 409, code: .alreadyLinked,
        detail: "this user already signs in with an email and password (broker password change to change it)")

    static func label(_ outcome: PasswordLinkOutcome) -> String {
        switch outcome {
        case .added: "linked"
        case .emailTaken: "email_taken"
        case .alreadyHasOne: "provider_taken"
        case .userMissing: "user_missing"
        }
    }

    /// `POST /auth/unlink {"provider"}`: detaches that way in, unless it is the user's last.
    func unlink(_ input: RequestInput, authorization: String?) async throws -> APIResponse {
        let view = try await grants.tokens.authenticateAccount(authorization: authorization)
        let (session, user) = (view.session, view.user)
        try await StepUp.requireStrongest(view, authorization: authorization, store: store, now: now)
        let name = try input.string("provider")
        guard let provider = ProviderID(rawValue: name) else {
            throw APIError.invalidRequest("unknown provider \"\(name.prefix(64))\"")
        }
        // The sessions started with this way in end with it: whoever signed in through it (perhaps the
        // reason it is being removed) keeps no refresh token. This request's own session may be one of them.
        let ended = try await detach(provider, from: user.id)
        return APIResponse(
            status: 200,
            body: [
                "user_id": .string(user.id.description), "provider": .string(provider.rawValue),
                "status": "unlinked", "sessions_ended": .int(Int64(ended.count)),
                "this_session_ended": .bool(ended.contains(session.id)),
            ],
            headers: [("Cache-Control", "no-store")])
    }

    /// Detaches `provider`'s way in from `user` — the API's `/auth/unlink` and the account page alike — unless it
    /// is their last; the ids of the sessions (CLI, apps, browser) that ended with it.
    func detach(_ provider: ProviderID, from user: UserID) async throws -> [String] {
        let display = provider == .custom ? "email and password" : signIn.displayName(provider)
        let outcome = try await store.unlinkIdentity(user: user, provider: provider, now: now)
        switch outcome {
        case .unlinked(let ended):
            metrics.link(provider: provider.rawValue, outcome: "unlinked")
            for _ in ended { metrics.revocation(reason: "unlinked") }
            audit.record(
                "unlinked", user: user, fields: ["provider": provider.rawValue, "sessions_ended": "\(ended.count)"])
            logger.info(
                "identity unlinked",
                metadata: [
                    "broker.user": "\(user)", "broker.provider": "\(provider)",
                    "broker.sessions_ended": "\(ended.count)",
                ])
            return ended
        case .notLinked:
            throw APIError.notFound("no \(display) sign-in is linked to this user")
        case .lastWayIn:
            metrics.link(provider: provider.rawValue, outcome: "last_identity")
            audit.record(
                "unlinked", outcome: "failure", user: user,
                fields: ["provider": provider.rawValue, "reason": "last_identity"])
            throw APIError(
                status: 409, code: .lastIdentity,
                detail: "\(display) is this user's only way to sign in; link another first "
                    + "(broker link --provider P, broker passkey add), or delete the account (broker account delete)")
        }
    }
}
