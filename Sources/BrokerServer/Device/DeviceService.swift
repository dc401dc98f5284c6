import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging

/// The device authorization grant (RFC 8628): `POST /auth/device` for the CLI, the `device_code` grant it
/// polls, and the pages a person uses on another device — `GET /device` (enter the code), a choice of how to
/// sign in (each browser provider, through the same modules as the loopback flow, or email and password), a
/// confirmation that names what is asking (RFC 8628 §5.4), and the decision.
///
/// Every form is CSRF-protected (``FormGuard``); every page is ``Page``'s (no script, no external asset, no
/// framing). Device codes are 256-bit and stored as SHA-256; user codes are eight letters of RFC 8628 §6.1's
/// twenty consonants. Wrong user codes and authorization requests are limited per client address.
final class DeviceService: ContextualService {
    let context: ServiceContext
    let accounts: AccountService
    let signIn: SignInService
    let passkeys: PasskeyService
    /// Device authorization requests per client address: 30 at once, 30 more every ten minutes.
    let requests: SharedRateLimiter
    /// Wrong user codes per client address: 10 at once, 10 more every ten minutes.
    let wrongCodes: SharedRateLimiter

    /// At most this many codes wait for approval at once (all brokers together).
    static let maxPending = 10_000
    static let alphabet = Array("BCDFGHJKLMNPQRSTVWXZ".utf8)
    static let grantType = "urn:ietf:params:oauth:grant-type:device_code"

    init(
        context: ServiceContext, accounts: AccountService, signIn: SignInService, passkeys: PasskeyService
    ) {
        self.context = context
        self.passkeys = passkeys
        self.accounts = accounts
        self.signIn = signIn
        // In the store: every broker on one database counts against the same buckets.
        requests = SharedRateLimiter(
            "device_authorization", capacity: 30, per: 600, store: context.store, clock: context.tokens.clock)
        wrongCodes = SharedRateLimiter(
            "device_user_code", capacity: 10, per: 600, store: context.store, clock: context.tokens.clock)
    }

    // MARK: The CLI's side

    /// `POST /auth/device` (RFC 8628 §3.1–3.2): `client_id=broker-cli`, optional `provider`; with
    /// `purpose=link` and the session's bearer token, a link (`broker link --device`): the provider account
    /// signed in with on the other device is attached to that session's user.
    func authorize(_ input: RequestInput, address: String?, authorization: String? = nil) async throws
        -> APIResponse
    {
        guard try input.optionalString("client_id") == TokenIssuer.cliClientID else {
            throw APIError(status: 401, code: .invalidClient, detail: "client_id must be broker-cli")
        }
        var provider: ProviderID?
        if let name = try input.optionalString("provider") {
            guard let id = ProviderID(rawValue: name), configuration.enabledProviders.contains(id) else {
                throw APIError.invalidRequest("provider \"\(name.prefix(64))\" is not enabled on this broker")
            }
            provider = id
        }
        var linkUser: UserID?
        var linkSession: String?
        switch try input.optionalString("purpose") {
        case nil, "sign_in": break
        case "link":
            // An account token, never an API access token (RT2-1); the approval is bound to its session.
            let view = try await tokens.authenticateAccount(authorization: authorization)
            try await StepUp.requireStrongest(view, authorization: authorization, store: store, now: now)
            let user = view.user.id
            linkSession = view.session.id
            guard let provider, provider != .custom else {
                throw APIError.invalidRequest("a link names the browser provider to link (provider)")
            }
            if let taken = try await store.identities(user: user).first(where: { $0.identity.provider == provider }) {
                throw APIError(
                    status: 409, code: .alreadyLinked,
                    detail: LinkMessages.providerTaken(
                        signIn.displayName(provider), provider: provider, subject: taken.identity.subject))
            }
            linkUser = user
        case let other?:
            throw APIError.invalidRequest("purpose must be sign_in or link, not \"\(other.prefix(32))\"")
        }
        try await requests.admit(
            address.map(SourceAddress.network), metrics: metrics, limit: "device_authorization",
            "too many device sign-ins")
        let deviceCode = try SecureRandom.token(byteCount: 32)
        let created = now
        for _ in 0..<4 {
            let userCode = try Self.newUserCode()
            let record = DeviceAuthorization(
                deviceCodeHash: Digest.sha256(deviceCode), userCode: userCode, clientID: TokenIssuer.cliClientID,
                provider: provider, clientAddress: address.map { String($0.prefix(64)) }, createdAt: created,
                expiresAt: created + configuration.deviceCodeTTL, interval: configuration.devicePollInterval,
                linkUser: linkUser, linkSession: linkSession)
            do {
                guard try await store.createDeviceAuthorization(record, maxPending: Self.maxPending, now: created)
                else {
                    throw metrics.throttle(
                        "device_pending", wait: 60, "too many device sign-ins are waiting; try later")
                }
            } catch let error as StoreError where error.code == .conflict {
                continue
            }
            audit.record(
                "device_authorization", user: linkUser,
                fields: ["provider": provider?.rawValue ?? "", "purpose": linkUser == nil ? "sign_in" : "link"])
            let base = tokens.issuer + "/device"
            return .tokens(
                DeviceAuthorizationResponse(
                    deviceCode: deviceCode, userCode: Self.display(userCode), verificationURI: base,
                    verificationURIComplete: base + "?user_code=" + Self.display(userCode),
                    expiresIn: configuration.deviceCodeTTL, interval: configuration.devicePollInterval
                ).json)
        }
        throw APIError.serverError
    }

    /// Eight letters from the twenty consonants, uniformly (rejection sampling of random bytes).
    static func newUserCode() throws -> String {
        var letters: [UInt8] = []
        while letters.count < 8 {
            for byte in try SecureRandom.bytes(16) where byte < 240 && letters.count < 8 {
                letters.append(alphabet[Int(byte % 20)])
            }
        }
        return String(decoding: letters, as: UTF8.self)
    }

    /// `BCDFGHJK` → `BCDF-GHJK`.
    static func display(_ code: String) -> String { String(code.prefix(4)) + "-" + String(code.dropFirst(4)) }

    /// A typed code as stored: letters only, upper case; `nil` unless it is eight letters of the alphabet.
    static func normalize(_ typed: String) -> String? {
        var letters: [UInt8] = []
        for byte in typed.utf8 {
            if byte == UInt8(ascii: "-") || byte == UInt8(ascii: " ") { continue }
            let upper = byte.asciiUppercased
            guard alphabet.contains(upper), letters.count < 8 else { return nil }
            letters.append(upper)
        }
        return letters.count == 8 ? String(decoding: letters, as: UTF8.self) : nil
    }

    /// `grant_type=urn:ietf:params:oauth:grant-type:device_code` (RFC 8628 §3.4–3.5).
    func grant(_ input: RequestInput) async throws -> APIResponse {
        guard try input.optionalString("client_id") == TokenIssuer.cliClientID else {
            throw APIError(status: 401, code: .invalidClient, detail: "client_id must be broker-cli")
        }
        let deviceCode = try input.string("device_code")
        // RFC 8707: the first access token for a registered resource; checked before the poll spends anything.
        let resource = try await ResourceIndicators.named(try input.optionalString("resource"), store: store)
        guard deviceCode.utf8.count == TokenIssuer.refreshTokenLength, Base64URL.decode(deviceCode) != nil else {
            throw APIError.invalidGrant("the device code is not one this broker issued")
        }
        let outcome = try await store.pollDeviceAuthorization(hash: Digest.sha256(deviceCode), now: now)
        metrics.devicePoll(outcome: outcome.label)
        switch outcome {
        case .unknown: throw APIError.invalidGrant("the device code is not one this broker issued")
        case .spent: throw APIError.invalidGrant("the device code was used already")
        case .expired:
            throw APIError(status: 400, code: .expiredToken, detail: "the code expired before it was approved")
        case .slowDown(let interval):
            throw APIError(
                status: 400, code: .slowDown, detail: "polling too fast: wait \(interval) seconds between polls")
        case .pending:
            throw APIError(status: 400, code: .authorizationPending, detail: "waiting for the person to approve")
        case .denied: throw APIError(status: 400, code: .accessDenied, detail: "the sign-in was denied")
        case .approved(let userID, let signedInWith):
            guard let user = try await store.user(id: userID) else {
                throw APIError.invalidGrant("the approving account no longer exists")
            }
            let body = try await tokens.startSession(
                user: user, clientID: TokenIssuer.cliClientID, scope: nil, signedInWith: signedInWith,
                resource: resource)
            audit.record("sign_in", user: user.id, fields: ["flow": "device"])
            return .tokens(body)
        }
    }

    // MARK: The person's side

    /// `GET /device[?user_code=…]`: the code form, or — for a code that waits — the choice of sign-in.
    func page(query: [String: String], address: String?) async throws -> APIResponse {
        guard let typed = query["user_code"], !typed.isEmpty else {
            return Page.response(status: 200, Page.deviceEntry(code: "", problem: nil))
        }
        guard let authorization = try await waiting(typed, address: address) else {
            return Page.response(
                status: 400,
                Page.deviceEntry(
                    code: String(typed.prefix(16)),
                    problem: "That code is not waiting for a sign-in. Check it on the device and type it again."))
        }
        let withPasskeys = passkeys.enabled && authorization.linkUser == nil
        let page = try FormGuard.page(secure: secure) { csrf in
            Page.deviceChoice(
                authorization: authorization, csrf: csrf, providers: choices(for: authorization),
                password: configuration.customEnabled && authorization.linkUser == nil, passkeys: withPasskeys,
                icons: signIn.icons)
        }
        return withPasskeys ? Page.withPasskeys(page) : page
    }

    /// `POST /auth/device/passkey {user_code, csrf, ceremony, credential}`: a phone's (or this computer's)
    /// passkey approves the terminal elsewhere: signed in, the confirmation page; refused, the choice again.
    func passkeySignIn(_ input: RequestInput, cookie: String?, address: String?) async throws -> APIResponse {
        let csrf = (try? input.string("csrf")) ?? ""
        guard FormGuard.accepts(cookie: cookie, field: csrf) else {
            return Page.response(status: 403, Page.staleDeviceForm)
        }
        guard passkeys.enabled,
            let authorization = try await waiting((try? input.string("user_code")) ?? "", address: address),
            authorization.linkUser == nil
        else {
            return Page.response(status: 400, Page.deviceGone)
        }
        let user: UserRecord
        let passkey: PasskeyRecord
        do {
            (user, passkey) = try await passkeys.signIn(
                ceremony: (try? input.string("ceremony")) ?? "", credential: (try? input.string("credential")) ?? "")
        } catch let failure as PasskeyService.Failure {
            return Page.withPasskeys(
                Page.response(
                    status: 400,
                    Page.deviceChoice(
                        authorization: authorization, csrf: csrf, providers: browserProviders(),
                        password: configuration.customEnabled, problem: failure.message, passkeys: true,
                        icons: signIn.icons)))
        }
        return try DeviceApproval.confirmationPage(
            user: user, authorization: authorization, key: signIn.flowKey, now: now, secure: secure,
            signedInWith: .passkey, proof: DeviceApproval.proof(passkey: passkey.id))
    }

    /// The authorization waiting under a typed code; a wrong code counts against the address (429 past the limit).
    /// The try is reserved before the lookup and given back on a hit (RT2-3): a burst of guesses in parallel
    /// cannot all pass a check made before any of them is counted.
    func waiting(_ typed: String, address: String?) async throws -> DeviceAuthorization? {
        let network = address.map(SourceAddress.network)
        if let network, let wait = try await wrongCodes.take(network) {
            throw metrics.throttle("device_user_code", wait: wait, "too many wrong codes; try later")
        }
        if let code = Self.normalize(typed),
            let found = try await store.pendingDeviceAuthorization(userCode: code, now: now)
        {
            if let network { try await wrongCodes.giveBack(network) }
            return found
        }
        audit.record("device_code_refused", outcome: "failure", fields: ["reason": "unknown_user_code"])
        return nil
    }

    /// The ways offered for `authorization`: a link offers only the provider it names.
    func choices(for authorization: DeviceAuthorization) -> [(ProviderID, String)] {
        guard authorization.linkUser != nil else { return browserProviders() }
        return browserProviders().filter { $0.0 == authorization.provider }
    }

    /// The browser providers this broker offers, with their names.
    func browserProviders() -> [(ProviderID, String)] {
        configuration.enabledProviders.filter { $0 != .custom && signIn.identityProviders[$0] != nil }.map {
            ($0, signIn.displayName($0))
        }
    }

    /// `POST /auth/device/signin {user_code, provider, csrf}`: off to the provider.
    func startSignIn(_ input: RequestInput, cookie: String?, address: String?) async throws -> APIResponse {
        guard FormGuard.accepts(cookie: cookie, field: (try? input.string("csrf")) ?? "") else {
            return Page.response(status: 403, Page.staleDeviceForm)
        }
        guard let authorization = try await waiting((try? input.string("user_code")) ?? "", address: address) else {
            return Page.response(status: 400, Page.deviceGone)
        }
        guard let provider = ProviderID(rawValue: (try? input.string("provider")) ?? ""),
            choices(for: authorization).contains(where: { $0.0 == provider })
        else {
            return Page.response(
                status: 400, Page.message(title: "Unknown provider", text: "Choose one from the list."))
        }
        let started: APIResponse
        do {
            started = try await signIn.startDeviceSignIn(
                provider: provider, userCode: authorization.userCode, address: address)
        } catch let error as APIError where error.status == 503 {
            // The provider cannot be reached: the choice again, saying so.
            var page = try FormGuard.page(secure: secure) { csrf in
                Page.deviceChoice(
                    authorization: authorization, csrf: csrf, providers: choices(for: authorization),
                    password: configuration.customEnabled && authorization.linkUser == nil,
                    problem: "\(signIn.displayName(provider)) cannot be reached right now. Try again in a while, "
                        + "or sign in another way.", icons: signIn.icons)
            }
            page.status = 503
            return page
        }
        // A page that moves on by itself rather than a redirect: the choice page's `form-action 'self'` would
        // stop a form's redirect to the provider's origin.
        guard let location = started.headers.first(where: { $0.0 == "Location" })?.1 else { return started }
        var onward = Page.response(status: 200, Page.onward(to: location, name: signIn.displayName(provider)))
        onward.headers += started.headers.filter { $0.0 == "Set-Cookie" }
        return onward
    }

    /// A provider vouched for someone in this flow's sign-in (``SignInCallback``): the confirmation page
    /// (Allow / Deny) for the authorization, if it is still waiting; for a link, only once the identity can be
    /// attached.
    func providerSignedIn(_ vouched: VouchedSignIn, userCode: String) async throws -> APIResponse {
        let (record, provider) = (vouched.identity, vouched.provider)
        guard let authorization = try await store.pendingDeviceAuthorization(userCode: userCode, now: now) else {
            throw SignInRedirect(reason: "expired", response: Page.response(status: 400, Page.deviceGone))
        }
        if let linkUser = authorization.linkUser {
            // A link: the provider account signs in as nobody here; it is attached once the person allows it,
            // and only while the session that asked is live (RT2-1).
            guard let target = try await store.user(id: linkUser),
                try await tokens.isLive(session: authorization.linkSession ?? "", of: linkUser)
            else {
                throw SignInRedirect(reason: "expired", response: Page.response(status: 400, Page.deviceGone))
            }
            if let (reason, problem) = try await linkProblem(record, to: linkUser) {
                metrics.link(provider: provider.rawValue, outcome: reason)
                audit.record(
                    "linked", outcome: "failure", user: linkUser,
                    fields: ["provider": provider.rawValue, "reason": reason, "flow": "device"])
                throw SignInRedirect(
                    reason: "link_refused",
                    response: Page.response(status: 409, Page.message(title: "Not linked", text: problem)))
            }
            return try DeviceApproval.confirmationPage(
                user: target, authorization: authorization, key: signIn.flowKey, now: now, secure: secure,
                signedInWith: provider, linking: record, providerName: signIn.displayName(provider))
        }
        let user: UserRecord
        switch try await store.signIn(record, now: now) {
        case .user(let found): user = found
        case .unlinked(let former):
            throw signIn.refusal(
                vouched.sealed, reason: "unlinked", code: .accessDenied,
                description: "this \(signIn.displayName(provider)) account was unlinked from the user \(former)")
        }
        logger.info(
            "signed in for a device", metadata: ["broker.provider": "\(provider)", "broker.user": "\(user.id)"])
        audit.record(
            "sign_in", user: user.id,
            fields: vouched.details.merging(["provider": provider.rawValue, "flow": "device"]) { $1 })
        return try DeviceApproval.confirmationPage(
            user: user, authorization: authorization, key: signIn.flowKey, now: now, secure: secure,
            signedInWith: provider, proof: DeviceApproval.proof(identity: record))
    }

    /// `POST /auth/device/password {user_code, email, password, csrf}`: the custom account, then the
    /// confirmation.
    func passwordSignIn(_ input: RequestInput, cookie: String?, address: String?) async throws -> APIResponse {
        let csrf = (try? input.string("csrf")) ?? ""
        guard FormGuard.accepts(cookie: cookie, field: csrf) else {
            return Page.response(status: 403, Page.staleDeviceForm)
        }
        guard configuration.customEnabled,
            let authorization = try await waiting((try? input.string("user_code")) ?? "", address: address),
            authorization.linkUser == nil
        else {
            return Page.response(status: 400, Page.deviceGone)
        }
        let email = (try? input.string("email")) ?? ""
        let account: PasswordAccount
        do {
            account = try await accounts.authenticate(
                email: email, password: Secret((try? input.string("password")) ?? ""), address: address)
        } catch let error as APIError where error.status < 500 {
            metrics.signIn(provider: "custom", outcome: error.code.rawValue)
            audit.record("sign_in", outcome: "failure", fields: ["provider": "custom", "reason": error.code.rawValue])
            return Page.response(
                status: error.status,
                Page.deviceChoice(
                    authorization: authorization, csrf: csrf, providers: browserProviders(), password: true,
                    email: String(email.prefix(254)),
                    problem: error.code == .invalidCredentials ? "Wrong email or password." : error.detail,
                    icons: signIn.icons))
        }
        if try await accounts.secondFactors.factor(of: account.user.id) != nil {
            return try await secondFactorPage(authorization, user: account.user.id, problem: nil)
        }
        if configuration.requireMFA {
            audit.record(
                "sign_in", outcome: "failure", user: account.user.id,
                fields: ["provider": "custom", "reason": "mfa_enrollment_required", "flow": "device"])
            return Page.response(
                status: 403,
                Page.deviceChoice(
                    authorization: authorization, csrf: csrf, providers: browserProviders(), password: true,
                    email: String(email.prefix(254)),
                    problem: "This broker asks for a second factor, and this account has none yet. Add one (broker "
                        + "mfa totp add --email \(account.email)), then sign in again.",
                    icons: signIn.icons))
        }
        return try passwordSignedIn(authorization, account: account, way: .custom)
    }

    private func passwordSignedIn(_ authorization: DeviceAuthorization, account: PasswordAccount, way: ProviderID)
        throws -> APIResponse
    {
        metrics.signIn(provider: "custom", outcome: "success")
        audit.record(
            "sign_in", user: account.user.id, fields: ["provider": "custom", "flow": "device", "method": way.rawValue])
        return try DeviceApproval.confirmationPage(
            user: account.user, authorization: authorization, key: signIn.flowKey, now: now, secure: secure,
            signedInWith: way, proof: DeviceApproval.proof(passwordHash: account.passwordHash))
    }

    /// The code page after the password; an account with a passkey may use it instead of the code.
    private func secondFactorPage(
        _ authorization: DeviceAuthorization, user: UserID, problem: String?, status: Int = 200
    )
        async throws -> APIResponse
    {
        let ticket = try accounts.secondFactors.ticket(for: user)
        let withPasskey = passkeys.enabled ? try await !store.passkeys(user: user).isEmpty : false
        var response = try FormGuard.page(secure: secure) { csrf in
            Page.secondFactor(
                action: "/auth/device/mfa", fields: [("user_code", authorization.userCode)], ticket: ticket, csrf: csrf,
                continuing: "the device that asked", problem: problem,
                mailRecovery: accounts.secondFactors.mailer != nil,
                passkey: withPasskey
                    ? Page.passkeySignIn(
                        action: "/auth/device/mfa-passkey",
                        hidden: [("user_code", authorization.userCode), ("ticket", ticket), ("csrf", csrf)],
                        label: "Use a passkey instead") : nil)
        }
        response.status = status
        return withPasskey ? Page.withPasskeys(response) : response
    }

    /// `POST /auth/device/mfa-passkey {user_code, ticket, csrf, ceremony, credential}`: a passkey of the same
    /// account as the second step after the password, then the confirmation.
    func secondFactorPasskey(_ input: RequestInput, cookie: String?, address: String?) async throws -> APIResponse {
        guard FormGuard.accepts(cookie: cookie, field: (try? input.string("csrf")) ?? "") else {
            return Page.response(status: 403, Page.staleDeviceForm)
        }
        guard passkeys.enabled,
            let authorization = try await waiting((try? input.string("user_code")) ?? "", address: address),
            authorization.linkUser == nil
        else {
            return Page.response(status: 400, Page.deviceGone)
        }
        guard let user = accounts.secondFactors.user(ofTicket: (try? input.string("ticket")) ?? "") else {
            return Page.response(
                status: 400, Page.message(title: "Sign in again", text: "The sign-in took too long; start it again."))
        }
        let owner: UserRecord
        let passkey: PasskeyRecord
        do {
            (owner, passkey) = try await passkeys.signIn(
                ceremony: (try? input.string("ceremony")) ?? "", credential: (try? input.string("credential")) ?? "")
        } catch let failure as PasskeyService.Failure {
            return try await secondFactorPage(authorization, user: user, problem: failure.message, status: 400)
        }
        guard owner.id == user else {
            audit.record(
                "sign_in", outcome: "failure", user: user,
                fields: ["provider": "custom", "reason": "passkey_of_another_account", "flow": "device"])
            return try await secondFactorPage(
                authorization, user: user,
                problem: "That passkey belongs to another account. Use a passkey of this one, or the code.", status: 401
            )
        }
        metrics.signIn(provider: "custom", outcome: "success")
        audit.record(
            "sign_in", user: user, fields: ["provider": "custom", "flow": "device", "method": "password+passkey"])
        return try DeviceApproval.confirmationPage(
            user: owner, authorization: authorization, key: signIn.flowKey, now: now, secure: secure,
            signedInWith: .passkey, proof: DeviceApproval.proof(passkey: passkey.id))
    }

    /// `POST /auth/device/mfa {user_code, ticket, otp, csrf}`: the code after the password, then the
    /// confirmation.
    func secondFactorSignIn(_ input: RequestInput, cookie: String?, address: String?) async throws -> APIResponse {
        guard FormGuard.accepts(cookie: cookie, field: (try? input.string("csrf")) ?? "") else {
            return Page.response(status: 403, Page.staleDeviceForm)
        }
        guard configuration.customEnabled,
            let authorization = try await waiting((try? input.string("user_code")) ?? "", address: address),
            authorization.linkUser == nil
        else {
            return Page.response(status: 400, Page.deviceGone)
        }
        guard let user = accounts.secondFactors.user(ofTicket: (try? input.string("ticket")) ?? ""),
            let account = try await store.passwordAccount(user: user)
        else {
            return Page.response(
                status: 400, Page.message(title: "Sign in again", text: "The sign-in took too long; start it again."))
        }
        let method: SecondFactorService.Method?
        do {
            method = try await accounts.secondFactors.check(
                (try? input.string("otp")) ?? "", user: user, address: address)
        } catch let error as APIError where error.status < 500 {
            return try await secondFactorPage(authorization, user: user, problem: error.detail, status: error.status)
        }
        guard method != nil else {
            metrics.signIn(provider: "custom", outcome: "wrong_code")
            audit.record(
                "sign_in", outcome: "failure", user: user,
                fields: ["provider": "custom", "reason": "wrong_code", "flow": "device"])
            return try await secondFactorPage(
                authorization, user: user,
                problem: "Wrong or already used code. Type the code the app shows now, or a recovery code.", status: 401
            )
        }
        return try passwordSignedIn(authorization, account: account, way: .customOTP)
    }

    /// `POST /auth/device/decision {approval, decision, csrf}`: Allow or Deny, once.
    func decide(_ input: RequestInput, cookie: String?) async throws -> APIResponse {
        guard FormGuard.accepts(cookie: cookie, field: (try? input.string("csrf")) ?? "") else {
            return Page.response(status: 403, Page.staleDeviceForm)
        }
        guard let approval = DeviceApproval.open((try? input.string("approval")) ?? "", key: signIn.flowKey),
            now <= approval.expiresAt
        else {
            return Page.response(status: 400, Page.deviceGone)
        }
        let allow = (try? input.string("decision")) == "allow"
        // Decided once, on what holds now (RT2-2): the authorization must still wait; a link's asking session
        // must still be live; the way in the approval was got with must still be the user's. A replayed Allow
        // after a Deny, an unlink or a password change attaches and approves nothing.
        guard let pending = try await store.pendingDeviceAuthorization(userCode: approval.userCode, now: now) else {
            return FormGuard.clearing(Page.response(status: 400, Page.deviceGone), secure: secure)
        }
        if allow, let problem = try await staleApproval(approval, pending: pending) {
            _ = try await store.decideDeviceAuthorization(
                userCode: approval.userCode, user: nil, signedInWith: nil, now: now)
            audit.record(
                "device_denied", outcome: "failure", user: approval.user, fields: ["reason": "approval_outdated"])
            return FormGuard.clearing(
                Page.response(status: 409, Page.message(title: "Not signed in", text: problem)), secure: secure)
        }
        // A link's identity is attached just before the pending → approved step, so that the device's next
        // poll finds the link made; if another decision wins that step, a link made here is taken back (one the
        // user had already is left alone).
        var linkedHere = false
        if allow, let identity = approval.identity {
            switch try await attach(identity, to: approval.user, userCode: approval.userCode) {
            case .refused(let page): return FormGuard.clearing(page, secure: secure)
            case .attached(let new): linkedHere = new
            }
        }
        guard
            try await store.decideDeviceAuthorization(
                userCode: approval.userCode, user: allow ? approval.user : nil, signedInWith: approval.signedInWith,
                now: now)
        else {
            if linkedHere, let identity = approval.identity {
                _ = try await store.unlinkIdentity(user: approval.user, provider: identity.provider, now: now)
            }
            return FormGuard.clearing(Page.response(status: 400, Page.deviceGone), secure: secure)
        }
        audit.record(
            allow ? "device_approved" : "device_denied", user: approval.user,
            fields: approval.identity == nil ? [:] : ["purpose": "link"])
        logger.info(
            allow ? "device sign-in approved" : "device sign-in denied", metadata: ["broker.user": "\(approval.user)"])
        let page: String
        if !allow {
            page = Page.message(
                title: "Sign-in denied",
                text: "The device was not signed in. If you did not start this, nothing else is needed.")
        } else if approval.identity != nil {
            page = Page.message(
                title: "Linked",
                text: "The account now signs in as \(approval.user). Go back to the device: broker continues by itself."
            )
        } else {
            page = Page.message(
                title: "You are signed in on the device",
                text: "Go back to the device: broker continues by itself. You can close this page.")
        }
        return FormGuard.clearing(Page.response(status: 200, page), secure: secure)
    }
}

extension DeviceService {
    /// Why an Allow can no longer be honoured, if it cannot (RT2-1, RT2-2): the link's asking session ended; the
    /// password the approval was got with changed; the provider account it was got with no longer signs in as
    /// the user. `nil`: it stands.
    func staleApproval(_ approval: DeviceApproval, pending: DeviceAuthorization) async throws -> String? {
        if let linkUser = pending.linkUser {
            guard linkUser == approval.user,
                try await tokens.isLive(session: pending.linkSession ?? "", of: linkUser)
            else { return "The session that asked for this link has ended. Run broker link again on the device." }
        }
        guard let proof = approval.proof else { return nil }
        if approval.signedInWith == .passkey {
            let passkeys = try await store.passkeys(user: approval.user)
            guard passkeys.contains(where: { DeviceApproval.proof(passkey: $0.id) == proof }) else {
                return "The passkey you signed in with was removed since. Start again from the device."
            }
            return nil
        }
        if approval.signedInWith.identityProvider == .custom {
            let account = try await store.passwordAccount(user: approval.user)
            guard let account, DeviceApproval.proof(passwordHash: account.passwordHash) == proof else {
                return "The password changed since this approval was given. Start again from the device."
            }
            return nil
        }
        let linked = try await store.identities(user: approval.user)
        guard linked.contains(where: { DeviceApproval.proof(identity: $0.identity) == proof }) else {
            return "The account you signed in with no longer signs in as this user. Start again from the device."
        }
        return nil
    }

    /// What attaching a device link's identity came to.
    enum Attachment {
        /// Attached to the user; `new`: by this call (`false`: the user had it already).
        case attached(new: Bool)
        /// Not attachable: the page that says why (the authorization has been denied, so the CLI stops).
        case refused(APIResponse)
    }

    /// Attaches the identity of a device link once the person allowed it.
    func attach(_ identity: IdentityRecord, to user: UserID, userCode: String) async throws -> Attachment {
        let outcome = try await store.linkIdentity(identity, to: user, now: now)
        metrics.link(provider: identity.provider.rawValue, outcome: outcome.label)
        let name = signIn.displayName(identity.provider)
        let problem: String
        switch outcome {
        case .linked:
            audit.record("linked", user: user, fields: ["provider": identity.provider.rawValue, "flow": "device"])
            return .attached(new: true)
        case .alreadyLinked: return .attached(new: false)
        case .ownedByAnotherUser: problem = LinkMessages.owned(name)
        case .providerTaken(let subject):
            problem = LinkMessages.providerTaken(name, provider: identity.provider, subject: subject)
        case .userMissing: problem = "the user to link to no longer exists"
        }
        audit.record(
            "linked", outcome: "failure", user: user,
            fields: ["provider": identity.provider.rawValue, "reason": outcome.label, "flow": "device"])
        _ = try await store.decideDeviceAuthorization(userCode: userCode, user: nil, signedInWith: nil, now: now)
        return .refused(Page.response(status: 409, Page.message(title: "Not linked", text: problem)))
    }
}

/// The confirmation step's token: which authorization, which user, until when — sealed under the flow key,
/// so that the decision needs no session and cannot be forged or moved to another code.
struct DeviceApproval: Sendable, Hashable {
    var userCode: String
    var user: UserID
    var expiresAt: Int64
    /// The way in the person signed in with on the page; the session the approval starts records it.
    var signedInWith: ProviderID
    /// For a link: the provider account to attach to ``user`` when the person allows it.
    var identity: IdentityRecord? = nil
    /// What the sign-in on the page rested on, checked again at the decision (RT2-2): for a password, a digest
    /// of the password hash then in force (a changed password changes it); for a provider, `provider:subject`
    /// of the account that signed in as the user (an unlink removes it). `nil` for a link's sign-in, whose
    /// account is not the user's yet.
    var proof: String? = nil

    static let lifetime: Int64 = 600

    /// The proof of a password sign-in: the first 16 bytes of the SHA-256 of the password's PHC hash, hex.
    static func proof(passwordHash: String) -> String { Array(Digest.sha256(passwordHash).prefix(16)).hexString }

    /// The proof of a provider sign-in: the account's `provider:subject`.
    static func proof(identity: IdentityRecord) -> String { "\(identity.provider.rawValue):\(identity.subject)" }
    /// The passkey a device approval was signed in with (still registered when the approval is used).
    static func proof(passkey id: String) -> String { "passkey:" + id }
    private static let associatedData = Array("device-approval".utf8)

    func seal(key: [UInt8]) throws -> String {
        var document: [String: JSONValue] = [
            "c": .string(userCode), "u": .string(user.description), "e": .int(expiresAt),
            "w": .string(signedInWith.rawValue),
        ]
        if let identity { document["i"] = .string(identity.serialized) }
        if let proof { document["p"] = .string(proof) }
        return try SealedDocument.seal(document, key: key, purpose: Self.associatedData)
    }

    static func open(_ sealed: String, key: [UInt8]) -> DeviceApproval? {
        guard
            let fields = SealedDocument.open(
                sealed, key: key, purpose: associatedData, maxLength: SealedSignIn.maxSealedLength),
            let code = fields["c"]?.stringValue, let user = fields["u"]?.stringValue.flatMap(UserID.init),
            let expires = fields["e"]?.intValue,
            let way = fields["w"]?.stringValue.flatMap(ProviderID.init(rawValue:))
        else { return nil }
        var identity: IdentityRecord?
        if let text = fields["i"] {
            guard let parsed = text.stringValue.flatMap(IdentityRecord.init(serialized:)) else { return nil }
            identity = parsed
        }
        var proof: String?
        if let text = fields["p"] {
            guard let value = text.stringValue else { return nil }
            proof = value
        }
        return DeviceApproval(
            userCode: code, user: user, expiresAt: expires, signedInWith: way, identity: identity, proof: proof)
    }

    /// The Allow / Deny page for `user` and `authorization`, with its CSRF cookie.
    static func confirmationPage(
        user: UserRecord, authorization: DeviceAuthorization, key: [UInt8], now: Int64, secure: Bool,
        signedInWith: ProviderID, linking identity: IdentityRecord? = nil, providerName: String? = nil,
        proof: String? = nil
    ) throws -> APIResponse {
        let approval = try DeviceApproval(
            userCode: authorization.userCode, user: user.id,
            expiresAt: min(authorization.expiresAt, now + lifetime), signedInWith: signedInWith, identity: identity,
            proof: proof
        ).seal(key: key)
        return try FormGuard.page(secure: secure) { csrf in
            Page.deviceConfirm(
                authorization: authorization, user: user, approval: approval, csrf: csrf, linking: identity,
                providerName: providerName)
        }
    }
}

extension DevicePoll {
    var label: String {
        switch self {
        case .unknown: "unknown"
        case .expired: "expired"
        case .slowDown: "slow_down"
        case .pending: "pending"
        case .denied: "denied"
        case .approved: "approved"
        case .spent: "spent"
        }
    }
}
