import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging

/// `/account`: the account page, on the broker's own browser session (``AccountPageClient``). It lists what the
/// broker keeps about the signed-in person — sessions (the CLI's, apps', browsers'), the apps they allowed, their
/// ways in, passkeys, the second factor — and changes each with a form (`POST /auth/account/page/ACTION`, a CSRF
/// token in every one, no script except the passkey ceremony's). The same rules as the API's hold: a change to
/// how the account is reached needs a recent sign-in (``StepUp/recent``) at the strongest level the account has
/// (both factors when it has two); taking access away (a session, an app) needs only the session.
final class AccountPageService: ContextualService {
    let authorization: AuthorizationService
    let links: LinkService
    let passkeys: PasskeyService
    let selfService: AccountSelfService
    var accounts: AccountService { selfService.accounts }
    var secondFactors: SecondFactorService { accounts.secondFactors }
    var signIn: SignInService { links.signIn }
    var sessions: BrowserSessions { authorization.sessions }
    var context: ServiceContext { authorization.context }

    init(
        authorization: AuthorizationService, links: LinkService, passkeys: PasskeyService,
        selfService: AccountSelfService
    ) {
        self.authorization = authorization
        self.links = links
        self.passkeys = passkeys
        self.selfService = selfService
    }

    // MARK: The page

    /// `GET /account`: the page for the browser session's user, or the sign-in page that leads back to it.
    func page(query: [String: String], cookie: String?) async throws -> APIResponse {
        guard let session = try await sessions.current(cookie: cookie),
            let user = try await store.user(id: session.userID)
        else {
            return try authorization.accountSignIn(problem: query["error"] == nil ? nil : Self.failedSignIn(query))
        }
        var problem: String?
        if query["error"] != nil { problem = Self.failedSignIn(query) }
        return try await render(
            user: user, session: session, said: query["said"].flatMap(AccountPageClient.Said.init), problem: problem)
    }

    /// Why the sign-in the page asked for did not come back, in fixed words (the query is anyone's to write).
    private static func failedSignIn(_ query: [String: String]) -> String {
        switch query["error"] {
        case OAuthErrorCode.unmetAuthenticationRequirements.rawValue?:
            "That change needs a sign-in with both factors: your password and a code from your authenticator app, "
                + "or a passkey. Nothing was changed."
        case OAuthErrorCode.accessDenied.rawValue?: "The sign-in was cancelled. Nothing was changed."
        default: "The sign-in did not complete. Nothing was changed."
        }
    }

    private func render(
        user: UserRecord, session: BrowserSessionRecord, said: AccountPageClient.Said?, problem: String?
    ) async throws -> APIResponse {
        var view = AccountView(user: user, signedInWith: wayName(session.signedInWith), said: said, problem: problem)
        let cliAndApps = try await store.sessions(user: user.id).filter { $0.revokedAt == nil }
        view.sessions = cliAndApps.sorted { $0.createdAt > $1.createdAt }.map { record in
            AccountView.Session(
                id: record.id,
                client: record.clientID == CLIClient.clientID ? "The broker CLI" : record.clientID,
                signedInWith: record.signedInWith.map(wayName), since: record.createdAt)
        }
        view.browsers = try await store.browserSessions(user: user.id)
            .filter { $0.revokedAt == nil && $0.expiresAt > now }
            .map { browser in
                AccountView.Browser(
                    id: browser.id, current: browser.id == session.id, signedInWith: wayName(browser.signedInWith),
                    since: browser.authTime)
            }
        var apps: [String: AccountView.App] = [:]
        for consent in try await store.consents(user: user.id) {
            apps[consent.clientID] = AccountView.App(
                clientID: consent.clientID, scopes: consent.scopes, since: consent.grantedAt, sessions: 0)
        }
        for record in cliAndApps where record.clientID != CLIClient.clientID {
            apps[
                record.clientID,
                default: AccountView.App(clientID: record.clientID, scopes: [], since: nil, sessions: 0)
            ]
            .sessions += 1
        }
        view.apps = apps.values.sorted { $0.clientID < $1.clientID }
        let identities = try await store.identities(user: user.id)
        let password = try await store.passwordAccount(user: user.id)
        view.ways = identities.map { linked in
            AccountView.Way(
                provider: linked.identity.provider.rawValue, name: displayName(linked.identity.provider),
                detail: linked.identity.email ?? linked.identity.name ?? linked.identity.subject,
                since: linked.linkedAt)
        }
        if let password {
            view.ways.insert(
                AccountView.Way(
                    provider: ProviderID.custom.rawValue, name: "Email and password",
                    detail: password.email + (password.emailVerifiedAt == nil ? " (not confirmed)" : ""), since: nil),
                at: 0)
        }
        let linked = Set(identities.map(\.identity.provider))
        view.linkable = configuration.enabledProviders
            .filter { $0 != .custom && signIn.identityProviders[$0] != nil && !linked.contains($0) }
            .map { ($0.rawValue, displayName($0)) }
        view.passkeysEnabled = passkeys.enabled
        view.passkeys = try await store.passkeys(user: user.id).map {
            AccountView.Passkey(id: $0.id, name: $0.name, since: $0.createdAt, lastUsed: $0.lastUsedAt)
        }
        if password != nil {
            if let factor = try await secondFactors.factor(of: user.id) {
                view.secondFactor = .on(
                    since: factor.createdAt, codesLeft: try await store.recoveryCodesLeft(user: user.id))
            } else {
                view.secondFactor = .off
            }
        }
        view.hasPassword = password != nil
        view.canAddPassword = password == nil && configuration.customEnabled
        return try FormGuard.page(secure: secure) { csrf in
            view.csrf = csrf
            return Page.account(view)
        }
    }

    /// How the page names a way in.
    private func wayName(_ way: ProviderID) -> String {
        switch way {
        case .custom: "your password"
        case .customOTP: "your password and a code"
        case .passkey: "a passkey"
        default: displayName(way)
        }
    }

    // MARK: The forms

    /// `POST /auth/account/page/ACTION`: one change, then back to the page saying how it went.
    func act(_ action: String, _ input: RequestInput, cookie: String?, address: String?) async throws -> APIResponse {
        guard FormGuard.accepts(cookie: cookie, field: (try? input.string("csrf")) ?? "") else {
            return Page.response(status: 403, Page.staleAccountForm)
        }
        guard let session = try await sessions.current(cookie: cookie),
            let user = try await store.user(id: session.userID)
        else {
            return try authorization.accountSignIn(problem: "Your sign-in ended; sign in again.")
        }
        func field(_ name: String) -> String { ((try? input.string(name)) ?? "").prefixed(2048) }
        switch action {
        case "sign-out":
            _ = try await store.endBrowserSession(id: session.id, now: now)
            audit.record("signed_out", user: user.id, fields: ["flow": "account_page"])
            return signedOut(.signedOut)
        case "session":
            let id = field("id")
            guard let record = try await store.session(id: id), record.userID == user.id, record.revokedAt == nil,
                try await store.revokeSession(id: id, now: now)
            else { return AccountPageClient.home(said: .notFound) }
            metrics.revocation(reason: "account_page")
            audit.record(
                "session_revoked", user: user.id,
                fields: ["session": id, "client_id": record.clientID, "flow": "account_page"])
            return AccountPageClient.home(said: .sessionEnded)
        case "browser":
            let id = field("id")
            guard
                try await store.browserSessions(user: user.id).contains(where: {
                    $0.id == id && $0.revokedAt == nil
                })
            else { return AccountPageClient.home(said: .notFound) }
            let ended = try await store.endBrowserSession(id: id, now: now)
            audit.record(
                "browser_session_ended", user: user.id,
                fields: ["sessions_ended": "\(ended.count)", "flow": "account_page"])
            return id == session.id ? signedOut(.signedOut) : AccountPageClient.home(said: .browserEnded)
        case "app":
            let clientID = field("client_id")
            let hadConsent = try await store.consent(user: user.id, clientID: clientID) != nil
            let ended = try await store.revokeConsent(user: user.id, clientID: clientID, now: now)
            guard hadConsent || !ended.isEmpty else { return AccountPageClient.home(said: .notFound) }
            for _ in ended { metrics.revocation(reason: "consent_revoked") }
            audit.record(
                "app_consent_revoked", user: user.id,
                fields: ["client_id": clientID, "sessions_ended": "\(ended.count)", "flow": "account_page"])
            return AccountPageClient.home(said: .appRevoked)
        case "export":
            var response = APIResponse(
                status: 200, body: try await selfService.exportDocument(of: user),
                headers: [
                    ("Cache-Control", "no-store"),
                    ("Content-Disposition", "attachment; filename=\"broker-account.json\""),
                ])
            response.headers.append(("X-Content-Type-Options", "nosniff"))
            return response
        default:
            break
        }
        // Changes to how the account is reached: a recent sign-in, as strong as the account can give.
        if let again = try await freshSignIn(session) { return again }
        switch action {
        case "unlink":
            guard let provider = ProviderID(rawValue: field("provider")) else {
                return AccountPageClient.home(said: .notFound)
            }
            do {
                _ = try await links.detach(provider, from: user.id)
            } catch let error as APIError where error.code == .lastIdentity {
                return AccountPageClient.home(said: .lastWayIn)
            } catch let error as APIError where error.status == 404 {
                return AccountPageClient.home(said: .notFound)
            }
            return AccountPageClient.home(said: .unlinked)
        case "link":
            return try await link(field("provider"), user: user, session: session, address: address)
        case "link-password":
            do {
                _ = try await links.linkPassword(input, user: user, address: address)
            } catch let error as APIError where error.status < 500 {
                var page = try await render(user: user, session: session, said: nil, problem: error.detail)
                page.status = error.status
                return page
            }
            return AccountPageClient.home(said: .passwordAdded)
        case "passkey-remove":
            do {
                try await passkeys.removePasskey(id: field("id"), of: user.id)
            } catch let error as APIError where error.code == .lastIdentity {
                return AccountPageClient.home(said: .lastWayIn)
            } catch let error as APIError where error.status == 404 {
                return AccountPageClient.home(said: .notFound)
            }
            return AccountPageClient.home(said: .passkeyRemoved)
        case "passkey-add":
            guard passkeys.enabled else { return Page.response(status: 404, Page.passkeysOff) }
            let ticket = try PasskeyTicket(
                user: user.id, session: PasskeyService.browserSessionPrefix + session.id,
                expiresAt: now + PasskeyTicket.lifetime
            ).seal(key: passkeys.flowKey)
            return APIResponse(
                status: 303, body: .object([:]),
                headers: [
                    ("Location", "/auth/passkey/add?" + FormEncoding.encode([("ticket", ticket)])),
                    ("Cache-Control", "no-store"),
                ])
        case "mfa-add":
            guard let account = try await store.passwordAccount(user: user.id) else {
                return AccountPageClient.home(said: .notFound)
            }
            guard try await secondFactors.factor(of: user.id) == nil else {
                return AccountPageClient.home(said: .secondFactorAdded)
            }
            let started = try secondFactors.begin(user: user.id, account: account.email)
            return try enrolmentPage(uri: started.uri, key: started.key, enrolment: started.enrolment, problem: nil)
        case "mfa-confirm":
            let enrolment = field("enrolment")
            guard secondFactors.enrolmentUser(enrolment) == user.id,
                let account = try await store.passwordAccount(user: user.id),
                let shown = secondFactors.reopen(enrolment: enrolment, account: account.email)
            else { return AccountPageClient.home(said: .notFound) }
            let codes: [String]
            do {
                codes = try await secondFactors.confirm(
                    enrolment: enrolment, code: field("code"), user: user.id, address: address)
            } catch let error as APIError where error.status == 409 {
                return AccountPageClient.home(said: .secondFactorAdded)
            } catch let error as APIError where error.status < 500 {
                return try enrolmentPage(
                    uri: shown.uri, key: shown.key, enrolment: enrolment, problem: error.detail, status: error.status)
            }
            return try codesPage(codes, added: true)
        case "mfa-remove", "recovery-codes":
            guard try await secondFactors.factor(of: user.id) != nil else {
                return AccountPageClient.home(said: .notFound)
            }
            let event = action == "mfa-remove" ? "second_factor_removed" : "recovery_codes_replaced"
            guard try await secondFactors.check(field("code"), user: user.id, address: address) != nil else {
                audit.record(
                    event, outcome: "failure", user: user.id, fields: ["reason": "wrong_code", "flow": "account_page"])
                return AccountPageClient.home(said: .wrongCode)
            }
            if action == "recovery-codes" {
                return try codesPage(try await secondFactors.regenerateRecoveryCodes(user: user.id), added: false)
            }
            _ = try await secondFactors.remove(user: user.id)
            return AccountPageClient.home(said: .secondFactorRemoved)
        case "delete":
            guard field("confirm") == "DELETE" else { return AccountPageClient.home(said: .notConfirmed) }
            if let account = try await store.passwordAccount(user: user.id) {
                guard
                    try await accounts.verifyCurrentPassword(
                        Secret(field("password")), of: account, address: address)
                else {
                    audit.record(
                        "account_deleted", outcome: "failure", user: user.id,
                        fields: ["reason": "wrong_password", "flow": "account_page"])
                    return AccountPageClient.home(said: .wrongPassword)
                }
            }
            try await selfService.deleteAccount(user.id, flow: "account_page")
            var gone = Page.response(
                status: 200,
                Page.message(
                    title: "Your account is deleted",
                    text: "Everything broker kept about you is gone, and every session has ended."))
            gone.headers.append(("Set-Cookie", sessions.cookie("", maxAge: 0)))
            return FormGuard.clearing(gone, secure: secure)
        default:
            return Page.response(status: 404, Page.message(title: "Not found", text: "No such change."))
        }
    }

    /// The sign-in page again when `session` is older than ``StepUp/recent`` or weaker than the account can sign
    /// in (RFC 9470's rule in a browser); `nil` when it will do.
    private func freshSignIn(_ session: BrowserSessionRecord) async throws -> APIResponse? {
        let two = try await StepUp.strongest(of: session.userID, store: store) == AuthenticationContext.twoFactors
        let weak = two && AuthenticationContext.acr(session.signedInWith) != AuthenticationContext.twoFactors
        guard weak || now - session.authTime > StepUp.recent else { return nil }
        return try authorization.accountSignIn(
            problem: weak
                ? "This change needs a sign-in with both factors: your password and a code from your authenticator "
                    + "app, or a passkey. Sign in again, then make it."
                : "This change needs a recent sign-in. Sign in again, then make it.",
            fresh: true, twoFactors: two, said: .signedInAgain)
    }

    /// Off to the provider to link it: the sign-in there comes back into ``LinkService`` (bound to this browser,
    /// for this browser session), which attaches it and returns here.
    private func link(_ name: String, user: UserRecord, session: BrowserSessionRecord, address: String?)
        async throws -> APIResponse
    {
        guard let provider = ProviderID(rawValue: name), provider != .custom, signIn.identityProviders[provider] != nil
        else { return AccountPageClient.home(said: .notFound) }
        if try await store.identities(user: user.id).contains(where: { $0.identity.provider == provider }) {
            return AccountPageClient.home(said: .linkTaken)
        }
        var request = AuthorizationRequest(
            clientID: AccountPageClient.clientID, redirectURI: AccountPageClient.redirectURI(issuer: issuer),
            scopes: ["openid"], state: nil, nonce: nil, codeChallenge: nil, prompt: ["login"], maxAge: nil,
            loginHint: nil, expectedSubject: nil, expiresAt: now + AuthorizationRequest.lifetime)
        request.link = AuthorizationRequest.LinkTarget(user: user.id, session: session.id)
        let started: APIResponse
        do {
            started = try await signIn.startAuthorizationSignIn(
                provider: provider, request: try request.seal(key: signIn.flowKey), address: address)
        } catch let error as APIError where error.status == 503 {
            return AccountPageClient.home(said: .linkFailed)
        }
        guard let location = started.headers.first(where: { $0.0 == "Location" })?.1 else { return started }
        var onward = Page.response(status: 200, Page.onward(to: location, name: displayName(provider)))
        onward.headers += started.headers.filter { $0.0 == "Set-Cookie" }
        return onward
    }

    private func enrolmentPage(uri: String, key: String, enrolment: String, problem: String?, status: Int = 200)
        throws -> APIResponse
    {
        var response = try FormGuard.page(secure: secure) { csrf in
            Page.accountEnrolment(uri: uri, key: key, enrolment: enrolment, csrf: csrf, problem: problem)
        }
        response.status = status
        return response
    }

    private func codesPage(_ codes: [String], added: Bool) throws -> APIResponse {
        Page.response(status: 200, Page.accountRecoveryCodes(codes, added: added))
    }

    /// Back to the page (which then asks to sign in), the browser's session cookie cleared.
    private func signedOut(_ said: AccountPageClient.Said) -> APIResponse {
        var response = AccountPageClient.home(said: said)
        response.headers.append(("Set-Cookie", sessions.cookie("", maxAge: 0)))
        return response
    }
}

extension String {
    /// At most `count` characters (a form field taken no longer than any real value of it).
    fileprivate func prefixed(_ count: Int) -> String { String(prefix(count)) }
}

/// What the account page shows, gathered before it is drawn (``Page/account(_:)``).
struct AccountView {
    struct Session {
        var id: String
        var client: String
        var signedInWith: String?
        var since: Int64
    }

    struct Browser {
        var id: String
        var current: Bool
        var signedInWith: String
        var since: Int64
    }

    struct App {
        var clientID: String
        var scopes: [String]
        var since: Int64?
        var sessions: Int
    }

    struct Way {
        var provider: String
        var name: String
        var detail: String
        var since: Int64?
    }

    struct Passkey {
        var id: String
        var name: String
        var since: Int64
        var lastUsed: Int64?
    }

    enum SecondFactor {
        case off
        case on(since: Int64, codesLeft: Int)
    }

    var user: UserRecord
    var signedInWith: String
    var said: AccountPageClient.Said?
    var problem: String?
    var csrf = ""
    var sessions: [Session] = []
    var browsers: [Browser] = []
    var apps: [App] = []
    var ways: [Way] = []
    var linkable: [(id: String, name: String)] = []
    var passkeysEnabled = false
    var passkeys: [Passkey] = []
    /// `nil`: no password, so no second factor to add (a passkey is two factors by itself).
    var secondFactor: SecondFactor?
    var hasPassword = false
    /// No password yet, and the broker takes them: the form that adds one.
    var canAddPassword = false
}
