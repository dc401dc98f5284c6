import BrokerCore
import BrokerCrypto
import BrokerStore

/// The HTTP side of ``PasskeyService``: the account API (ticket, list, remove), the page that adds a passkey,
/// and the CLI's loopback sign-in with one.
extension PasskeyService {
    var secure: Bool { tokens.issuer.lowercased().hasPrefix("https://") }

    // MARK: The account API (an account token, RT2-1: passkeys change how the account is reached)

    /// `POST /auth/passkey/ticket`: the URL of the page that adds a passkey for the account token's user.
    func ticket(authorization: String?) async throws -> APIResponse {
        let view = try await tokens.authenticateAccount(authorization: authorization)
        guard enabled else { throw Self.unavailable }
        try await StepUp.requireStrongest(view, authorization: authorization, store: store, now: now)
        let ticket = try PasskeyTicket(
            user: view.user.id, session: view.session.id, expiresAt: now + PasskeyTicket.lifetime
        ).seal(key: flowKey)
        return APIResponse(
            status: 200,
            body: [
                "url": .string(tokens.issuer + "/auth/passkey/add?" + FormEncoding.encode([("ticket", ticket)])),
                "expires_in": .int(PasskeyTicket.lifetime),
            ],
            headers: [("Cache-Control", "no-store")])
    }

    /// `GET /auth/passkeys`: the account token's user's passkeys.
    func list(authorization: String?) async throws -> APIResponse {
        let view = try await tokens.authenticateAccount(authorization: authorization)
        let passkeys = try await store.passkeys(user: view.user.id)
        return APIResponse(
            status: 200,
            body: [
                "passkeys": .array(
                    passkeys.map { passkey in
                        [
                            "id": .string(passkey.id), "name": .string(passkey.name),
                            "created_at": .int(passkey.createdAt),
                            "last_used_at": passkey.lastUsedAt.map(JSONValue.int) ?? .null,
                            "algorithm": .string(
                                COSEKey.Algorithm(rawValue: passkey.algorithm)?.name ?? "\(passkey.algorithm)"),
                            "backed_up": .bool(passkey.backedUp),
                            "transports": .array(passkey.transports.map(JSONValue.string)),
                        ]
                    })
            ],
            headers: [("Cache-Control", "no-store")])
    }

    /// `POST /auth/passkeys/remove {id}`: removes one of the account token's user's passkeys.
    func remove(_ input: RequestInput, authorization: String?) async throws -> APIResponse {
        let view = try await tokens.authenticateAccount(authorization: authorization)
        try await StepUp.requireStrongest(view, authorization: authorization, store: store, now: now)
        let id = try input.string("id")
        try await removePasskey(id: id, of: view.user.id)
        return APIResponse(status: 200, body: ["removed": .string(id)])
    }

    /// Removes one of `user`'s passkeys — the API's and the account page's — unless it is their last way in.
    func removePasskey(id: String, of user: UserID) async throws {
        let removal = id.utf8.count <= 1400 ? try await store.removePasskey(id: id, user: user, now: now) : .notFound
        switch removal {
        case .removed: break
        case .notFound:
            metrics.passkey(event: "removal", outcome: "not_found")
            throw APIError.notFound("no passkey \(id.prefix(64)) on this account (broker passkey list shows them)")
        case .lastWayIn:
            metrics.passkey(event: "removal", outcome: "last_identity")
            audit.record(
                "passkey_removed", outcome: "failure", user: user,
                fields: ["passkey": String(id.prefix(16)), "reason": "last_identity"])
            throw APIError(
                status: 409, code: .lastIdentity,
                detail: "this passkey is the account's only way to sign in; add another first (broker passkey add, "
                    + "broker link --provider P), or delete the account (broker account delete)")
        }
        metrics.passkey(event: "removal", outcome: "success")
        audit.record("passkey_removed", user: user, fields: ["passkey": String(id.prefix(16))])
    }

    // MARK: Adding a passkey

    /// `GET /auth/passkey/add?ticket=…`: spends the ticket and shows the page with a registration ceremony for
    /// its user (the ceremony, not the ticket, carries the permission from here on, bound to the page's CSRF
    /// cookie).
    func addPage(query: [String: String]) async throws -> APIResponse {
        guard enabled else { return Page.response(status: 404, Page.passkeysOff) }
        guard let sealed = query["ticket"], let ticket = PasskeyTicket.open(sealed, key: flowKey, now: now),
            try await isLive(session: ticket.session, of: ticket.user),
            let user = try await store.user(id: ticket.user),
            try await store.spendStateMarker(PasskeyTicket.marker(sealed), expiresAt: ticket.expiresAt + 60)
        else {
            return Page.response(status: 400, Page.passkeyTicketGone)
        }
        let (options, ceremony) = try await registrationOptions(
            user: user, for: .register(user: user.id, session: ticket.session))
        return Page.withPasskeys(
            try FormGuard.page(secure: secure) { csrf in
                Page.passkeyAdd(
                    user: user.email ?? user.name ?? user.id.description, options: options, ceremony: ceremony,
                    csrf: csrf)
            })
    }

    /// `GET /auth/passkey/recover?token=…` (the mailed recovery link): the page that adds a passkey to an
    /// account whose only ways in are passkeys. Opening it spends nothing — the link is spent when a passkey is
    /// registered with it (``register(ceremony:credential:name:)``), so a mail scanner's visit is harmless.
    func recoverPage(query: [String: String]) async throws -> APIResponse {
        guard enabled else { return Page.response(status: 404, Page.passkeysOff) }
        guard let token = query["token"], let hash = MailLink.hash(token),
            let user = try await store.emailLinkUser(hash: hash, purpose: EmailLinkPurpose.passkeyRecovery, now: now)
        else {
            return Page.response(status: 400, Page.recoveryLinkGone)
        }
        let (options, ceremony) = try await registrationOptions(user: user, for: .recover(user: user.id, link: hash))
        return Page.withPasskeys(
            try FormGuard.page(secure: secure) { csrf in
                Page.passkeyAdd(
                    user: user.email ?? user.name ?? user.id.description, options: options, ceremony: ceremony,
                    csrf: csrf, recovery: true)
            })
    }

    /// `POST /auth/passkey/add {ceremony, csrf, credential, name}`.
    func add(_ input: RequestInput, cookie: String?) async throws -> APIResponse {
        let sealed = (try? input.string("ceremony")) ?? ""
        // Only for the wording: whether this page came from a recovery mail, the account page or
        // `broker passkey add`.
        var recovery = false
        var accountPage = false
        switch PasskeyCeremony.open(sealed, key: flowKey, now: now)?.purpose {
        case .recover?: recovery = true
        case .register(_, let session)?: accountPage = session.hasPrefix(Self.browserSessionPrefix)
        default: break
        }
        let again =
            recovery
            ? " Ask for a new link: “Forgot your password?” on the sign-in page."
            : accountPage ? " Add it again from your account page (/account)." : " Run broker passkey add again."
        guard FormGuard.accepts(cookie: cookie, field: (try? input.string("csrf")) ?? "") else {
            return Page.response(
                status: 403,
                Page.message(
                    title: "This form has expired",
                    text: "The page was opened in another browser or too long ago." + again))
        }
        do {
            let passkey = try await register(
                ceremony: sealed, credential: (try? input.string("credential")) ?? "",
                name: (try? input.optionalString("name")) ?? "")
            return FormGuard.clearing(
                Page.response(
                    status: 200, Page.passkeyAdded(name: passkey.name, recovery: recovery, accountPage: accountPage)),
                secure: secure)
        } catch let failure as Failure {
            return Page.response(
                status: 400, Page.message(title: "No passkey was added", text: failure.message + again))
        }
    }

    // MARK: The CLI's loopback sign-in

    /// `GET /auth/passkey/start?redirect_uri&state&code_challenge&code_challenge_method=S256`: the page with the
    /// passkey button, for `broker login --provider passkey` (the same checks as a provider's `/start`).
    func loopbackPage(query: [String: String]) async throws -> APIResponse {
        guard enabled else { throw Self.unavailable }
        let (redirectURI, state, challenge) = try CLIClient.loopbackRequest(query)
        let flow = try PasskeyLoopback(
            redirectURI: redirectURI, state: state, codeChallenge: challenge, expiresAt: now + PasskeyLoopback.lifetime
        ).seal(key: flowKey)
        return Page.withPasskeys(
            try FormGuard.page(secure: secure) { csrf in Page.passkeyLoopback(flow: flow, csrf: csrf) })
    }

    /// `POST /auth/passkey/finish {flow, csrf, ceremony, credential}`: signed in, the CLI gets a one-time code at
    /// its loopback address (a page that moves on by itself: a redirect answering a form would meet the page's
    /// `form-action 'self'`); refused, the page says why and offers the button again.
    func loopbackFinish(_ input: RequestInput, cookie: String?) async throws -> APIResponse {
        let csrf = (try? input.string("csrf")) ?? ""
        guard FormGuard.accepts(cookie: cookie, field: csrf),
            let flow = PasskeyLoopback.open((try? input.string("flow")) ?? "", key: flowKey, now: now)
        else {
            return Page.response(
                status: 403,
                Page.message(
                    title: "This sign-in page has expired", text: "Run broker login --provider passkey again."))
        }
        let user: UserRecord
        do {
            (user, _) = try await signIn(
                ceremony: (try? input.string("ceremony")) ?? "", credential: (try? input.string("credential")) ?? "")
        } catch let failure as Failure {
            return Page.withPasskeys(
                Page.response(
                    status: 400,
                    Page.passkeyLoopback(flow: (try? input.string("flow")) ?? "", csrf: csrf, problem: failure.message))
            )
        }
        // The CLI's authorization request, signed in with the passkey: its code, like every other.
        let request = CLIClient.loopbackAuthorization(
            redirectURI: flow.redirectURI, state: flow.state, codeChallenge: flow.codeChallenge,
            expiresAt: flow.expiresAt)
        let location = try await AuthorizationCodes(context: context).issue(
            request, user: user.id, signedInWith: .passkey, authTime: now, browserSession: nil)
        return FormGuard.clearing(Page.response(status: 200, Page.appOnward(to: location)), secure: secure)
    }
}
