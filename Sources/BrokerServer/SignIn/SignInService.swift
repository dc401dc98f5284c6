import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging
import ProviderSupport
import Synchronization

/// The browser flow at the broker (CONTRACT.md "The loopback browser flow"): `/auth/{provider}/start`,
/// `/auth/{provider}/callback`, and the `authorization_code` grant.
///
/// Nothing is stored for a sign-in until the provider has vouched for someone: the pending sign-in (the CLI's
/// state, challenge and loopback redirect, the broker's nonce and PKCE verifier, an expiry and a random
/// marker) is sealed with AES-256-GCM into the broker's own `state`. The callback opens it, checks that its
/// marker is unspent, asks the provider module for the identity, and only then spends the marker (once) and
/// hands the CLI a one-time code.
package final class SignInService: ContextualService {
    package let context: ServiceContext
    /// The sign-in provider modules this broker's configuration enables.
    let identityProviders: [ProviderID: any IdentityProvider]
    /// Seals pending browser sign-ins into the broker's `state` (AES-256-GCM).
    package let flowKey: [UInt8]
    /// Where an app's sign-in goes once a provider vouched for someone (set by ``BrokerService``).
    let appSignIns = AppSignInHook()
    /// Starts and callbacks per client address: 120 at once, 120 more a minute (each may cost a provider call).
    let perAddress: RateLimiter
    /// Callbacks that reach the provider per sealed state: 5 (a replayed state is not a free provider call).
    let perState: RateLimiter

    init(
        context: ServiceContext, identityProviders: [ProviderID: any IdentityProvider],
        flowKey: [UInt8]
    ) {
        self.context = context
        self.identityProviders = identityProviders
        self.flowKey = flowKey
        perAddress = RateLimiter(capacity: 120, per: 60, clock: context.tokens.clock)
        perState = RateLimiter(capacity: 5, per: Double(Self.pendingLifetime), clock: context.tokens.clock)
    }

    /// `GET /auth/providers`: the enabled providers this broker has a module for, and the passkey when passkeys
    /// are on (a passkey signs in through the broker's own page, the CLI's loopback flow).
    func providers(passkeysEnabled: Bool) -> APIResponse {
        var list: [ProvidersResponse.Entry] = configuration.enabledProviders.filter {
            $0 == .custom || identityProviders[$0] != nil
        }.map { id in
            let schema = configuration.schema(id)
            return ProvidersResponse.Entry(
                id: id.rawValue, name: schema?.displayName ?? "Email and password",
                flow: (schema?.flow ?? .password).rawValue)
        }
        if passkeysEnabled { list.append(ProvidersResponse.Entry(id: "passkey", name: "Passkey", flow: "browser")) }
        return APIResponse(status: 200, body: ProvidersResponse(providers: list).json)
    }

    /// 429 when `address` has started or completed too many sign-ins lately.
    func limit(_ address: String?) throws {
        if let address, let wait = perAddress.take(SourceAddress.network(address)) {
            throw metrics.throttle(
                "browser_sign_in", wait: wait, "too many sign-ins from this address; try again later")
        }
    }

    /// A pending sign-in lives at most this long (the person may be typing a password at the provider).
    static let pendingLifetime: Int64 = 600
    /// A one-time code must be redeemed within this many seconds.
    static let codeLifetime: Int64 = 60

    /// The name people know a provider by (its descriptor's), for messages.
    func displayName(_ provider: ProviderID) -> String {
        configuration.schema(provider)?.displayName ?? provider.rawValue
    }

    /// Builds the provider modules this broker's configuration enables, from the build's descriptors.
    ///
    /// - Throws: a ``ConfigurationError`` when a module refuses its section, or when the configuration enables a
    ///   provider whose schema it was checked against but `descriptors` has no module for (two lists out of step).
    static func makeProviders(
        _ configuration: ServerConfiguration,
        from descriptors: [ProviderDescriptor],
        context: ProviderContext
    ) throws -> [ProviderID: any IdentityProvider] {
        var modules: [ProviderID: any IdentityProvider] = [:]
        for id in configuration.enabledProviders where id != .custom {
            guard let descriptor = descriptors.first(where: { $0.id == id }), let section = configuration.providers[id]
            else {
                throw ConfigurationError(
                    source: "providers.\(id)", key: nil, problem: "this build has no module for the provider")
            }
            do throws(ProviderError) {
                modules[descriptor.id] = try descriptor.make(
                    ProviderSection(id: descriptor.id, values: section), context)
            } catch {
                throw ConfigurationError(source: "providers.\(descriptor.id)", key: nil, problem: error.description)
            }
        }
        return modules
    }

    /// Whether `uri` is a loopback redirect the contract allows: `http`, host `127.0.0.1` or `[::1]`, any
    /// port, path `/callback`, nothing else.
    static func isLoopbackRedirect(_ uri: String) -> Bool {
        guard uri.hasPrefix("http://") else { return false }
        let rest = uri.dropFirst("http://".count)
        guard let slash = rest.firstIndex(of: "/") else { return false }
        let authority = rest[..<slash]
        guard rest[slash...] == "/callback" else { return false }
        let host: Substring
        let port: Substring?
        if authority.hasPrefix("[::1]") {
            host = "[::1]"
            let after = authority.dropFirst(5)
            port = after.isEmpty ? nil : (after.hasPrefix(":") ? after.dropFirst() : "x")
        } else if let colon = authority.firstIndex(of: ":") {
            host = authority[..<colon]
            port = authority[authority.index(after: colon)...]
        } else {
            host = authority
            port = nil
        }
        guard host == "127.0.0.1" || host == "[::1]" else { return false }
        if let port {
            guard port.utf8.count <= 5, port.isASCIIDigits, let number = Int(port),
                (1...65535).contains(number)
            else { return false }
        }
        return true
    }

    func callbackURL(_ provider: ProviderID) -> String { issuer + "/auth/\(provider.rawValue)/callback" }

    /// The CLI's part of a loopback sign-in's start (RFC 8252, RFC 7636), as every `/start` checks it: a loopback
    /// `redirect_uri` the contract allows, a `state` of at most 512 characters, and an S256 `code_challenge`.
    static func loopbackRequest(_ query: [String: String]) throws(APIError)
        -> (redirectURI: String, state: String, codeChallenge: String)
    {
        guard let redirectURI = query["redirect_uri"], Self.isLoopbackRedirect(redirectURI) else {
            throw APIError.invalidRequest(
                "redirect_uri must be http://127.0.0.1:PORT/callback or http://[::1]:PORT/callback")
        }
        guard let cliState = query["state"], !cliState.isEmpty, cliState.utf8.count <= 512 else {
            throw APIError.invalidRequest("state is required (at most 512 characters)")
        }
        guard query["code_challenge_method"] == "S256" else {
            throw APIError.invalidRequest("code_challenge_method must be S256")
        }
        guard let challenge = query["code_challenge"], PKCE.isValidS256Challenge(challenge) else {
            throw APIError.invalidRequest("code_challenge must be an S256 challenge (43 base64url characters)")
        }
        return (redirectURI, cliState, challenge)
    }

    /// `GET /auth/{provider}/start`.
    func startBrowserSignIn(provider name: String, query: [String: String], address: String? = nil) async throws
        -> APIResponse
    {
        let (provider, module) = try browserProvider(name)
        try limit(address)
        let (redirectURI, cliState, challenge) = try Self.loopbackRequest(query)
        var linkUser: UserID?
        var linkSession: String?
        if let sealedTicket = query["link_ticket"] {
            guard let ticket = LinkTicket.open(sealedTicket, key: flowKey, provider: provider) else {
                throw APIError.invalidRequest(
                    "link_ticket is not one this broker issued for \(displayName(provider)); run broker link again")
            }
            guard now <= ticket.expiresAt else {
                throw APIError.invalidRequest("the link ticket has expired; run broker link again")
            }
            guard ticket.codeChallenge == challenge else {
                throw APIError.invalidRequest("the link ticket was issued for another sign-in (code_challenge)")
            }
            guard try await tokens.isLive(session: ticket.session, of: ticket.user) else {
                throw APIError.invalidRequest(
                    "the session that asked for this link has ended (signed out or revoked); run broker link again")
            }
            linkUser = ticket.user
            linkSession = ticket.session
        }
        return try await redirect(
            to: provider, module: module,
            SealedSignIn(
                cliState: cliState, codeChallenge: challenge, redirectURI: redirectURI, nonce: "",
                providerVerifier: "", expiresAt: 0, marker: "",
                purpose: linkUser.map { .link(user: $0, session: linkSession ?? "") } ?? .loopback))
    }

    /// The device flow's sign-in at a provider (`POST /auth/device/signin`): the same sealed state, for the
    /// authorization with `userCode`, ending in the broker's confirmation page instead of a redirect to a CLI.
    func startDeviceSignIn(provider: ProviderID, userCode: String, address: String?) async throws -> APIResponse {
        let (provider, module) = try browserProvider(provider.rawValue)
        try limit(address)
        // The browser that typed the code gets a cookie the callback must bring back (RT2-4): the provider
        // URL this answer leads to is no use to anyone else, who would otherwise sign in and Allow the
        // device of whoever sent them the link.
        let binding = try SecureRandom.token(byteCount: 32)
        var response = try await redirect(
            to: provider, module: module,
            SealedSignIn(
                cliState: "", codeChallenge: "", redirectURI: "", nonce: "", providerVerifier: "", expiresAt: 0,
                marker: "", purpose: .device(userCode: userCode, binding: Self.bindingDigest(binding))))
        response.headers.append(
            ("Set-Cookie", bindingCookie(provider, value: binding, maxAge: Self.pendingLifetime)))
        return response
    }

    /// An app's sign-in at a provider (`POST /auth/authorize/provider`): the same sealed state, carrying the
    /// app's sealed request; the callback hands the user to ``appSignIns``.
    func startAppSignIn(provider: ProviderID, request: String, address: String?) async throws -> APIResponse {
        let (provider, module) = try browserProvider(provider.rawValue)
        try limit(address)
        // Bound to this browser as the device flow's is (RT3-2): the callback completes only where the cookie
        // is, so an attacker's own callback URL signs nobody else's browser in to broker (and so into apps).
        let binding = try SecureRandom.token(byteCount: 32)
        var response = try await redirect(
            to: provider, module: module,
            SealedSignIn(
                cliState: "", codeChallenge: "", redirectURI: "", nonce: "", providerVerifier: "", expiresAt: 0,
                marker: "", purpose: .app(request: request, binding: Self.bindingDigest(binding))))
        response.headers.append(
            ("Set-Cookie", bindingCookie(provider, value: binding, maxAge: Self.pendingLifetime)))
        return response
    }

    /// The browser binding cookie of a device or app sign-in, sent only to the provider's callback. The CLI's
    /// loopback and link sign-ins need none: their code goes to the CLI that holds the PKCE verifier and the
    /// `state` it checks, so a callback URL opened in another browser ends in a code nobody else can redeem.
    func bindingCookie(_ provider: ProviderID, value: String, maxAge: Int64) -> String {
        let secure = issuer.lowercased().hasPrefix("https://") ? "; Secure" : ""
        return "broker_device_\(provider.rawValue)=\(value); Path=/auth/\(provider.rawValue)/callback; "
            + "Max-Age=\(maxAge); HttpOnly; SameSite=Lax\(secure)"
    }

    static func bindingDigest(_ value: some StringProtocol) -> String {
        Base64URL.encode(Array(Digest.sha256(String(value)).prefix(16)))
    }

    /// Whether the request's cookies carry the binding sealed into a device sign-in.
    func bound(_ provider: ProviderID, cookieHeader: String?, digest: String) -> Bool {
        CookieHeader.values("broker_device_\(provider.rawValue)", in: cookieHeader).contains { value in
            ConstantTime.equals(Array(Self.bindingDigest(value).utf8), Array(digest.utf8))
        }
    }

    /// Seals `template` (with a fresh nonce, provider verifier, marker and expiry) into the provider's state
    /// and answers with the redirect to the provider's authorization page.
    private func redirect(to provider: ProviderID, module: any IdentityProvider, _ template: SealedSignIn)
        async throws -> APIResponse
    {
        let nonce = try SecureRandom.token(byteCount: 16)
        let verifier = try PKCE.generate().verifier
        let marker = try SecureRandom.token(byteCount: 16)
        var sealed = template
        (sealed.nonce, sealed.providerVerifier, sealed.marker) = (nonce, verifier, marker)
        sealed.expiresAt = now + Self.pendingLifetime
        let state = try sealed.seal(key: flowKey, provider: provider)
        let pending = PendingSignIn(
            state: state, nonce: nonce, codeVerifier: verifier, callbackURL: callbackURL(provider))
        let started: AuthorizationStart
        do {
            started = try await module.start(for: pending)
        } catch {
            logger.error("cannot start a sign-in", metadata: ["broker.provider": "\(provider)", "error": "\(error)"])
            throw APIError.serviceUnavailable("\(displayName(provider)) is not reachable: \(error)")
        }
        var response = APIResponse.redirect(started.url)
        if !started.carry.isEmpty {
            var fields = started.carry.mapValues(JSONValue.string)
            fields["_m"] = .string(marker)
            let box = try AESGCM.seal(
                JSONValue.object(fields).serializedBytes, key: flowKey,
                associatedData: Array("carry:\(provider.rawValue)".utf8))
            response.headers.append(
                ("Set-Cookie", cookie(provider, value: Base64URL.encode(box), maxAge: Self.pendingLifetime)))
        }
        return response
    }

    /// The cookie that carries a module's sealed state to its callback (and only there).
    func cookie(_ provider: ProviderID, value: String, maxAge: Int64) -> String {
        let secure = issuer.lowercased().hasPrefix("https://") ? "; Secure" : ""
        return "broker_flow_\(provider.rawValue)=\(value); Path=/auth/\(provider.rawValue)/callback; Max-Age=\(maxAge)"
            + "; HttpOnly; SameSite=Lax\(secure)"
    }

    /// What the start's cookie carried, when it belongs to the sign-in with `marker`.
    func carried(_ provider: ProviderID, cookieHeader: String?, marker: String) -> [String: String]? {
        guard let value = CookieHeader.values("broker_flow_\(provider.rawValue)", in: cookieHeader).first,
            let box = Base64URL.decode(value),
            let opened = AESGCM.open(box, key: flowKey, associatedData: Array("carry:\(provider.rawValue)".utf8)),
            let fields = JSONValue.parse(opened)?.objectValue,
            fields["_m"]?.stringValue == marker
        else { return nil }
        var carry: [String: String] = [:]
        for (key, value) in fields where key != "_m" { carry[key] = value.stringValue }
        return carry
    }

    /// `GET /auth/{provider}/callback`.
    func completeBrowserSignIn(
        provider name: String, query: [String: String], cookie: String? = nil, address: String? = nil
    ) async throws -> APIResponse {
        try limit(address)
        // The label is a provider this broker offers, never the path's text.
        let label = ProviderID(rawValue: name).flatMap { identityProviders[$0] == nil ? nil : $0.rawValue } ?? "unknown"
        var response: APIResponse
        do {
            response = try await metrics.counting(
                success: "success",
                { outcome in
                    metrics.signIn(provider: label, outcome: outcome)
                    if outcome != "success" {
                        audit.record("sign_in", outcome: "failure", fields: ["provider": label, "reason": outcome])
                    }
                }
            ) {
                try await completeSignIn(provider: name, query: query, cookie: cookie)
            }
        } catch let redirect as SignInRedirect {
            response = redirect.response
        }
        // The carried state has served its purpose (or is stale): drop it from the browser.
        if let provider = ProviderID(rawValue: name), cookie?.contains("broker_flow_\(name)=") == true {
            response.headers.append(("Set-Cookie", self.cookie(provider, value: "", maxAge: 0)))
        }
        if let provider = ProviderID(rawValue: name), cookie?.contains("broker_device_\(name)=") == true {
            response.headers.append(("Set-Cookie", bindingCookie(provider, value: "", maxAge: 0)))
        }
        return response
    }

    private func completeSignIn(provider name: String, query: [String: String], cookie: String?) async throws
        -> APIResponse
    {
        let (provider, module) = try browserProvider(name)
        guard let state = query["state"], let sealed = SealedSignIn.open(state, key: flowKey, provider: provider)
        else {
            throw APIError.invalidRequest("this sign-in's state is missing or was not issued by this broker")
        }
        let (cliState, challenge, redirectURI) = (sealed.cliState, sealed.codeChallenge, sealed.redirectURI)
        let (nonce, verifier, expiry, marker) = (sealed.nonce, sealed.providerVerifier, sealed.expiresAt, sealed.marker)
        guard now <= expiry else {
            throw refusal(
                sealed, reason: "expired", code: .accessDenied, description: "the sign-in took too long; start again")
        }
        if case .device(_, let binding) = sealed.purpose, !bound(provider, cookieHeader: cookie, digest: binding) {
            throw SignInRedirect(
                reason: "other_browser", response: Page.response(status: 400, Page.deviceOtherBrowser))
        }
        if case .app(_, let binding) = sealed.purpose, !bound(provider, cookieHeader: cookie, digest: binding) {
            throw SignInRedirect(reason: "other_browser", response: Page.response(status: 400, Page.appOtherBrowser))
        }
        // Checked now, spent only once the provider has vouched for someone: an unauthenticated request
        // with a state from /start (any visitor can get one) writes nothing.
        guard try await !store.isStateMarkerSpent(marker) else {
            throw APIError.invalidRequest("this sign-in has already been completed")
        }
        guard perState.take(marker) == nil else {
            throw APIError.invalidRequest("too many attempts to complete this sign-in; start again")
        }
        let pending = PendingSignIn(
            state: state, nonce: nonce, codeVerifier: verifier, callbackURL: callbackURL(provider))
        let carry = carried(provider, cookieHeader: cookie, marker: marker) ?? [:]
        let identity: Identity
        do {
            identity = try await module.complete(callback: query, pending: pending, carry: carry)
        } catch {
            logger.info("sign-in failed", metadata: ["broker.provider": "\(provider)", "error": "\(error)"])
            let code: OAuthErrorCode
            let description: String
            switch error {
            case .denied(let providerCode, let text):
                // The provider's own code when it is a plain OAuth error name, else access_denied.
                let plain =
                    !providerCode.isEmpty && providerCode.utf8.count <= 64
                    && providerCode.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || $0 == UInt8(ascii: "_") }
                code = plain ? OAuthErrorCode(providerCode) : .accessDenied
                description = text.isEmpty ? "\(displayName(provider)) said: \(providerCode)" : text
            case .invalidResponse, .unavailable:
                code = .serverError
                description = "\(displayName(provider)) sign-in failed: \(error)"
            }
            throw refusal(
                sealed, reason: { if case .denied = error { "denied" } else { "provider_error" } }(), code: code,
                description: description)
        }
        // Two copies of one callback racing: the provider's single-use code stops all but one, and the
        // marker stops whatever got through.
        guard try await store.spendStateMarker(marker, expiresAt: expiry) else {
            throw APIError.invalidRequest("this sign-in has already been completed")
        }
        let record = IdentityRecord(
            provider: provider, subject: identity.subject, email: identity.emailVerified ? identity.email : nil,
            name: identity.name)
        // Each purpose is finished by its own code.
        switch sealed.purpose {
        case .device(let userCode, _):
            return try await completeDeviceSignIn(record, provider: provider, userCode: userCode, sealed: sealed)
        case .app(let request, _):
            return try await completeAppSignIn(record, provider: provider, request: request)
        case .loopback:
            return try await completeLoopbackSignIn(
                record, provider: provider, redirectURI: redirectURI, cliState: cliState, challenge: challenge)
        case .link(let user, let session):
            return try await completeLinkSignIn(
                record, provider: provider, linkUser: user, linkSession: session, redirectURI: redirectURI,
                cliState: cliState, challenge: challenge)
        }
    }

    /// `broker link`, vouched for at the provider: a one-time code at the CLI's loopback, the identity attached
    /// only when the code is redeemed with the CLI's verifier.
    private func completeLinkSignIn(
        _ record: IdentityRecord, provider: ProviderID, linkUser: UserID, linkSession: String, redirectURI: String,
        cliState: String, challenge: String
    ) async throws -> APIResponse {
        let code = try SecureRandom.token(byteCount: 32)
        // Attached only when the code is redeemed with the CLI's verifier; refused here already when the
        // provider account is someone else's, or the session that asked has ended, so the person sees why
        // in the browser.
        var refusal: (String, String)?
        if try await !tokens.isLive(session: linkSession, of: linkUser) {
            refusal = ("session_ended", "the session that asked for this link has ended; run broker link again")
        } else {
            refusal = try await linkProblem(record, to: linkUser)
        }
        if let (reason, problem) = refusal {
            metrics.link(provider: provider.rawValue, outcome: reason)
            audit.record(
                "linked", outcome: "failure", user: linkUser,
                fields: ["provider": provider.rawValue, "reason": reason])
            throw SignInRedirect(
                reason: "link_refused",
                response: .redirect(
                    Self.loopback(
                        redirectURI, [("error", OAuthErrorCode.accessDenied.rawValue), ("error_description", problem)],
                        state: cliState,
                        issuer: issuer)))
        }
        try await store.createAuthorizationCode(
            AuthorizationCodeRecord(
                hash: Digest.sha256(code), userID: linkUser, codeChallenge: challenge, redirectURI: redirectURI,
                expiresAt: now + Self.codeLifetime, link: record, signedInWith: provider,
                linkSession: linkSession))
        logger.info("link confirmed at the provider", metadata: ["broker.provider": "\(provider)"])
        return .redirect(Self.loopback(redirectURI, [("code", code)], state: cliState, issuer: issuer))
    }

    /// The CLI's loopback sign-in, vouched for: a one-time code at its loopback redirect.
    private func completeLoopbackSignIn(
        _ record: IdentityRecord, provider: ProviderID, redirectURI: String, cliState: String, challenge: String
    ) async throws -> APIResponse {
        let code = try SecureRandom.token(byteCount: 32)
        let user: UserRecord
        switch try await store.signIn(record, now: now) {
        case .user(let found): user = found
        case .unlinked(let former):
            throw SignInRedirect(
                reason: "unlinked",
                response: .redirect(
                    Self.loopback(
                        redirectURI,
                        [
                            ("error", OAuthErrorCode.accessDenied.rawValue),
                            (
                                "error_description",
                                "this \(displayName(provider)) account was unlinked from the user \(former); sign in "
                                    + "another way and run broker link --provider \(provider.rawValue) to attach it again"
                            ),
                        ], state: cliState, issuer: issuer)))
        }
        try await store.createAuthorizationCode(
            AuthorizationCodeRecord(
                hash: Digest.sha256(code),
                userID: user.id,
                codeChallenge: challenge,
                redirectURI: redirectURI,
                expiresAt: now + Self.codeLifetime,
                signedInWith: provider
            ))
        logger.info("signed in", metadata: ["broker.provider": "\(provider)", "broker.user": "\(user.id)"])
        audit.record("sign_in", user: user.id, fields: ["provider": provider.rawValue])
        return .redirect(Self.loopback(redirectURI, [("code", code)], state: cliState, issuer: issuer))
    }

    /// An app's sign-in at a provider, vouched for: the user it signs in as goes on into the app's request.
    private func completeAppSignIn(_ record: IdentityRecord, provider: ProviderID, request: String) async throws
        -> APIResponse
    {
        let user: UserRecord
        switch try await store.signIn(record, now: now) {
        case .user(let found): user = found
        case .unlinked(let former):
            throw SignInRedirect(
                reason: "unlinked",
                response: Page.response(
                    status: 400,
                    Page.message(
                        title: "Not signed in",
                        text: "This \(displayName(provider)) account was unlinked from the user \(former). Sign in "
                            + "another way.")))
        }
        guard let finish = appSignIns.finish else {
            throw APIError.serviceUnavailable("apps cannot sign in on this broker")
        }
        logger.info("signed in for an app", metadata: ["broker.provider": "\(provider)", "broker.user": "\(user.id)"])
        audit.record("sign_in", user: user.id, fields: ["provider": provider.rawValue, "flow": "app"])
        return try await finish(user, provider, request)
    }

    /// A sign-in that ends without a user: a redirect carrying the error to the CLI's loopback, or for the
    /// device flow a page saying why.
    func refusal(_ sealed: SealedSignIn, reason: String, code: OAuthErrorCode, description: String)
        -> SignInRedirect
    {
        if case .app(let appRequest, _) = sealed.purpose {
            // An app's sign-in: the error goes back to the app (its redirect URI was checked at the start).
            guard let request = AuthorizationRequest.open(appRequest, key: flowKey, now: now) else {
                return SignInRedirect(reason: reason, response: Page.response(status: 400, Page.staleAppForm))
            }
            return SignInRedirect(
                reason: reason,
                response: .redirect(
                    request.response([("error", code.rawValue), ("error_description", description)], issuer: issuer)))
        }
        if case .device = sealed.purpose {
            return SignInRedirect(
                reason: reason,
                response: Page.response(
                    status: 400,
                    Page.message(title: "Sign-in failed", text: description + ". Start again from the device page.")))
        }
        return SignInRedirect(
            reason: reason,
            response: .redirect(
                Self.loopback(
                    sealed.redirectURI, [("error", code.rawValue), ("error_description", description)],
                    state: sealed.cliState,
                    issuer: issuer)))
    }

    /// The device flow after the provider vouched for someone: the confirmation page (Allow / Deny) for the
    /// authorization, if it is still waiting.
    private func completeDeviceSignIn(
        _ record: IdentityRecord, provider: ProviderID, userCode: String, sealed: SealedSignIn
    ) async throws -> APIResponse {
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
                user: target, authorization: authorization, key: flowKey, now: now,
                secure: issuer.lowercased().hasPrefix("https://"), signedInWith: provider, linking: record,
                providerName: displayName(provider))
        }
        let user: UserRecord
        switch try await store.signIn(record, now: now) {
        case .user(let found): user = found
        case .unlinked(let former):
            throw refusal(
                sealed, reason: "unlinked", code: .accessDenied,
                description: "this \(displayName(provider)) account was unlinked from the user \(former)")
        }
        logger.info(
            "signed in for a device", metadata: ["broker.provider": "\(provider)", "broker.user": "\(user.id)"])
        audit.record("sign_in", user: user.id, fields: ["provider": provider.rawValue, "flow": "device"])
        return try DeviceApproval.confirmationPage(
            user: user, authorization: authorization, key: flowKey, now: now,
            secure: issuer.lowercased().hasPrefix("https://"), signedInWith: provider,
            proof: DeviceApproval.proof(identity: record))
    }

    /// Why `identity` cannot be attached to `user`, in words for the person linking; `nil` when it can (or is
    /// attached to them already). The store decides again, atomically, when the code is redeemed.
    func linkProblem(_ identity: IdentityRecord, to user: UserID) async throws -> (reason: String, message: String)? {
        let name = displayName(identity.provider)
        if let owner = try await store.identityOwner(provider: identity.provider, subject: identity.subject) {
            return owner == user ? nil : ("owned_by_another_user", Self.ownedMessage(name))
        }
        if identity.derivedUserID != user, try await store.user(id: identity.derivedUserID) != nil {
            return ("owned_by_another_user", Self.ownedMessage(name))
        }
        if let taken = try await store.identities(user: user).first(where: {
            $0.identity.provider == identity.provider
        }) {
            return (
                "provider_taken",
                Self.providerTakenMessage(name, provider: identity.provider, subject: taken.identity.subject)
            )
        }
        return nil
    }

    static func ownedMessage(_ name: String) -> String {
        "this \(name) account already signs in as another broker user; sign in with it and delete that user "
            + "(broker account delete) or unlink it there, then link again"
    }

    static func providerTakenMessage(_ name: String, provider: ProviderID, subject: String) -> String {
        "another \(name) account (\(subject)) is linked to this user; unlink it first "
            + "(broker unlink --provider \(provider.rawValue))"
    }

    static func loopback(_ redirectURI: String, _ fields: [(String, String)], state: String, issuer: String) -> String {
        redirectURI + "?" + FormEncoding.encode(fields + [("state", state), ("iss", issuer)])
    }

    private func browserProvider(_ name: String) throws -> (ProviderID, any IdentityProvider) {
        guard let provider = ProviderID(rawValue: name), provider != .custom else {
            throw APIError.notFound("no browser sign-in provider \"\(name.prefix(64))\"")
        }
        guard let module = identityProviders[provider] else {
            throw APIError.notFound("\(displayName(provider)) is not enabled on this broker")
        }
        return (provider, module)
    }
}

/// A sign-in that failed at the provider or in time and is answered with a redirect to the client carrying the
/// error (RFC 6749 §4.1.2.1): thrown so that the failure is counted under `reason`, then answered as a redirect.
struct SignInRedirect: Error {
    let reason: String
    let response: APIResponse
}

/// A refusal answered as if it were a success (enumeration protection): thrown so that it is counted and
/// audited under `reason`, then answered with `response`.
struct ConcealedFailure: Error {
    let reason: String
    let response: APIResponse
}

/// The late-bound link from a provider's callback to the OpenID Provider's ``AuthorizationService`` (made after
/// the sign-in service it depends on).
final class AppSignInHook: Sendable {
    typealias Finish = @Sendable (UserRecord, ProviderID, String) async throws -> APIResponse
    private let value = Mutex<Finish?>(nil)

    var finish: Finish? { value.withLock { $0 } }

    func set(_ finish: @escaping Finish) { value.withLock { $0 = finish } }
}
