import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging
import ProviderSupport

/// Signing in at a provider, for whichever feature asked (an authorization request — an app's or the CLI's — or
/// the device flow): `/auth/{provider}/start` (the CLI's shortcut into an authorization request), the redirect
/// to the provider, and the provider's answer turned into an identity (``vouch(provider:query:cookie:)``).
/// What follows is the asking feature's (``SignInCallback``).
///
/// Nothing is stored for a sign-in until the provider has vouched for someone: the pending sign-in (what it is
/// for, the broker's nonce and PKCE verifier, an expiry and a random marker) is sealed with AES-256-GCM into the
/// broker's own `state`. The callback opens it, checks that its marker is unspent, asks the provider module for
/// the identity, and only then spends the marker (once).
package final class SignInService: ContextualService {
    package let context: ServiceContext
    /// The sign-in provider modules this broker's configuration enables.
    let identityProviders: [ProviderID: any IdentityProvider]
    /// Seals pending browser sign-ins into the broker's `state` (AES-256-GCM).
    package let flowKey: [UInt8]
    /// Starts and callbacks per client address: 120 at once, 120 more a minute (each may cost a provider call).
    let perAddress: RateLimiter
    /// Callbacks that reach the provider per sealed state: 5 (a replayed state is not a free provider call).
    let perState: RateLimiter
    /// The providers' icons on the sign-in pages (`icon_file`), as `data:` URLs.
    let icons: [ProviderID: String]

    init(
        context: ServiceContext, identityProviders: [ProviderID: any IdentityProvider],
        flowKey: [UInt8], icons: [ProviderID: String] = [:]
    ) {
        self.context = context
        self.identityProviders = identityProviders
        self.flowKey = flowKey
        self.icons = icons
        perAddress = RateLimiter(capacity: 120, per: 60, clock: context.tokens.clock)
        perState = RateLimiter(capacity: 5, per: Double(Self.pendingLifetime), clock: context.tokens.clock)
    }

    /// `GET /auth/providers`: the enabled providers this broker has a module for, and the passkey when passkeys
    /// are on (a passkey signs in through the broker's own page, the CLI's loopback flow).
    func providers(passkeysEnabled: Bool) -> APIResponse {
        var list: [ProvidersResponse.Entry] = configuration.enabledProviders.filter {
            $0 == .custom || identityProviders[$0] != nil
        }.map { id in
            ProvidersResponse.Entry(
                id: id.rawValue, name: configuration.displayName(id) ?? id.rawValue,
                flow: (configuration.schema(id)?.flow ?? .password).rawValue)
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
            let schema = configuration.schema(id)
            guard let schema,
                let descriptor = descriptors.first(where: { $0.id == schema.id && $0.schema.typed == schema.typed }),
                let section = configuration.providers[id]
            else {
                throw ConfigurationError(
                    source: "providers.\(id)", key: nil, problem: "this build has no module for the provider")
            }
            do throws(ProviderError) {
                modules[id] = try descriptor.make(ProviderSection(id: id, values: section), context)
            } catch {
                throw ConfigurationError(source: "providers.\(id)", key: nil, problem: error.reasonText)
            }
        }
        return modules
    }

    func callbackURL(_ provider: ProviderID) -> String { issuer + "/auth/\(provider.rawValue)/callback" }

    /// `GET /auth/{provider}/start`: the CLI's shortcut into an authorization request of the built-in client
    /// (``CLIClient``) — straight to one provider, with a fresh sign-in there and no browser session — or, with a
    /// `link_ticket`, a `broker link`.
    func startBrowserSignIn(provider name: String, query: [String: String], address: String? = nil) async throws
        -> APIResponse
    {
        let (provider, module) = try browserProvider(name)
        try limit(address)
        let (redirectURI, cliState, challenge) = try CLIClient.loopbackRequest(query)
        var link: AuthorizationRequest.LinkTarget?
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
            link = AuthorizationRequest.LinkTarget(user: ticket.user, session: ticket.session)
        }
        let request = CLIClient.loopbackAuthorization(
            redirectURI: redirectURI, state: cliState, codeChallenge: challenge,
            expiresAt: now + AuthorizationRequest.lifetime, link: link)
        do {
            return try await redirect(
                to: provider, module: module,
                purpose: .authorization(request: try request.seal(key: flowKey), binding: nil))
        } catch let error as APIError where error.status == 503 {
            // The provider cannot be reached (or answered discovery badly): the CLI waiting at its loopback
            // address hears it at once (RFC 6749 §4.1.2.1), rather than when its wait runs out.
            metrics.signIn(provider: provider.rawValue, outcome: "provider_error")
            return .redirect(
                request.response(
                    [("error", "temporarily_unavailable"), ("error_description", error.detail)], issuer: issuer))
        }
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
            to: provider, module: module, purpose: .device(userCode: userCode, binding: Self.bindingDigest(binding)))
        response.headers.append(
            ("Set-Cookie", bindingCookie(provider, value: binding, maxAge: Self.pendingLifetime)))
        return response
    }

    /// An authorization request's sign-in at a provider, chosen on the sign-in page (`POST
    /// /auth/authorize/provider`): the same sealed state, carrying the sealed request, bound to this browser.
    func startAuthorizationSignIn(provider: ProviderID, request: String, address: String?) async throws
        -> APIResponse
    {
        let (provider, module) = try browserProvider(provider.rawValue)
        try limit(address)
        // Bound to this browser as the device flow's is (RT3-2): the callback completes only where the cookie
        // is, so an attacker's own callback URL signs nobody else's browser in to broker (and so into apps).
        let binding = try SecureRandom.token(byteCount: 32)
        var response = try await redirect(
            to: provider, module: module,
            purpose: .authorization(request: request, binding: Self.bindingDigest(binding)))
        response.headers.append(
            ("Set-Cookie", bindingCookie(provider, value: binding, maxAge: Self.pendingLifetime)))
        return response
    }

    /// The browser binding cookie of a sign-in chosen in a browser, sent only to the provider's callback. The
    /// CLI's `/start` needs none: their code goes to the CLI that holds the PKCE verifier and the
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

    /// Seals `purpose` (with a fresh nonce, provider verifier, marker and expiry) into the provider's state and
    /// answers with the redirect to the provider's authorization page.
    private func redirect(to provider: ProviderID, module: any IdentityProvider, purpose: SealedSignIn.Purpose)
        async throws -> APIResponse
    {
        let nonce = try SecureRandom.token(byteCount: 16)
        let verifier = try PKCE.generate().verifier
        let marker = try SecureRandom.token(byteCount: 16)
        let sealed = SealedSignIn(
            nonce: nonce, providerVerifier: verifier, expiresAt: now + Self.pendingLifetime, marker: marker,
            purpose: purpose)
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

    /// The sign-in's cookies, spent or stale once its callback is answered: dropped from the browser.
    func clearingCookies(_ response: APIResponse, provider name: String, cookie: String?) -> APIResponse {
        var response = response
        if let provider = ProviderID(rawValue: name), cookie?.contains("broker_flow_\(name)=") == true {
            response.headers.append(("Set-Cookie", self.cookie(provider, value: "", maxAge: 0)))
        }
        if let provider = ProviderID(rawValue: name), cookie?.contains("broker_device_\(name)=") == true {
            response.headers.append(("Set-Cookie", bindingCookie(provider, value: "", maxAge: 0)))
        }
        return response
    }

    /// The metrics label of a callback's provider: one this broker offers, never the path's text.
    func label(_ name: String) -> String {
        ProviderID(rawValue: name).flatMap { identityProviders[$0] == nil ? nil : $0.rawValue } ?? "unknown"
    }

    /// The fields of a provider's form post that the callback reads; anything else is dropped.
    static let relayedFields = ["code", "state", "error", "error_description", "user"]
    /// How long a relayed form post may take to come back as a GET (one browser redirect).
    static let relayLifetime: Int64 = 120

    /// `POST /auth/{provider}/callback` (`response_mode=form_post`: Sign in with Apple). The provider's page
    /// posts across sites, so the browser sends no `SameSite=Lax` cookie — neither the binding cookie nor any
    /// other — and nothing is checked or done here: the fields the callback reads are sealed (AES-256-GCM under
    /// the flow key, for this provider, two minutes) and the browser is sent with them to `GET` the callback
    /// (303). That GET is a top-level navigation, which carries the Lax cookies, and is checked exactly as a
    /// redirecting provider's callback is — state, marker, browser binding — so the form post earns an attacker
    /// nothing a callback URL would not.
    func relay(provider name: String, form: [String: String], address: String?) throws -> APIResponse {
        try limit(address)
        let (provider, module) = try browserProvider(name)
        guard module.callbackMethod == .formPost else {
            throw APIError.methodNotAllowed(
                "\(displayName(provider)) answers with a redirect; its callback is GET only")
        }
        var fields: [String: JSONValue] = ["exp": .int(now + Self.relayLifetime)]
        for key in Self.relayedFields {
            guard let value = form[key] else { continue }
            guard value.utf8.count <= 8192 else {
                throw APIError.invalidRequest("the provider's \(key) is longer than this broker accepts")
            }
            fields[key] = .string(value)
        }
        let box = try AESGCM.seal(
            JSONValue.object(fields).serializedBytes, key: flowKey, associatedData: Array("relay:\(provider)".utf8))
        return APIResponse(
            status: 303, body: .object([:]),
            headers: [
                ("Location", callbackURL(provider) + "?relay=" + Base64URL.encode(box)), ("Cache-Control", "no-store"),
            ])
    }

    /// A callback's query: a relayed form post's fields (``relay(provider:form:address:)``), opened and in time;
    /// else the query itself.
    func callbackFields(_ provider: ProviderID, _ query: [String: String]) throws -> [String: String] {
        guard let relayed = query["relay"] else { return query }
        guard let box = Base64URL.decode(relayed),
            let opened = AESGCM.open(box, key: flowKey, associatedData: Array("relay:\(provider)".utf8)),
            let fields = JSONValue.parse(opened)?.objectValue, case .int(let expiry)? = fields["exp"]
        else { throw APIError.invalidRequest("this sign-in's relayed answer was not made by this broker") }
        guard now <= expiry else {
            throw APIError.invalidRequest("this sign-in's relayed answer has expired; start again")
        }
        var query: [String: String] = [:]
        for key in Self.relayedFields { query[key] = fields[key]?.stringValue }
        return query
    }

    /// `GET /auth/{provider}/callback`, up to the identity: the sealed state opened and checked, the provider
    /// asked, the marker spent. Throws ``SignInRedirect`` (the error for whoever asked) when it ends without one.
    func vouch(provider name: String, query: [String: String], cookie: String?) async throws -> VouchedSignIn {
        let (provider, module) = try browserProvider(name)
        let query = try callbackFields(provider, query)
        guard let state = query["state"], let sealed = SealedSignIn.open(state, key: flowKey, provider: provider)
        else {
            throw APIError.invalidRequest("this sign-in's state is missing or was not issued by this broker")
        }
        let (nonce, verifier, expiry, marker) = (sealed.nonce, sealed.providerVerifier, sealed.expiresAt, sealed.marker)
        guard now <= expiry else {
            throw refusal(
                sealed, reason: "expired", code: .accessDenied, description: "the sign-in took too long; start again")
        }
        switch sealed.purpose {
        case .device(_, let binding) where !bound(provider, cookieHeader: cookie, digest: binding):
            throw SignInRedirect(
                reason: "other_browser", response: Page.response(status: 400, Page.deviceOtherBrowser))
        case .authorization(_, let binding?) where !bound(provider, cookieHeader: cookie, digest: binding):
            throw SignInRedirect(reason: "other_browser", response: Page.response(status: 400, Page.appOtherBrowser))
        default: break
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
        if !identity.details.isEmpty {
            var metadata: Logger.Metadata = ["broker.provider": "\(provider)"]
            for (key, value) in identity.details { metadata["broker.\(key)"] = "\(value)" }
            logger.info("provider sign-in details", metadata: metadata)
        }
        return VouchedSignIn(
            provider: provider,
            identity: IdentityRecord(
                provider: provider, subject: identity.subject, email: identity.emailVerified ? identity.email : nil,
                name: identity.name,
                // The one place a provider's profile is checked: only the standard claims, each fit to pass on.
                profile: identity.profile.filter {
                    Identity.profileClaims.contains($0.key) && Identity.profileValue($0.key, $0.value) != nil
                }),
            sealed: sealed, details: identity.details)
    }

    /// A sign-in that ends without a user: for an authorization request, the error at its redirect URI (the
    /// app's or the CLI's, checked at the start); for the device flow, a page saying why.
    func refusal(_ sealed: SealedSignIn, reason: String, code: OAuthErrorCode, description: String)
        -> SignInRedirect
    {
        switch sealed.purpose {
        case .authorization(let sealedRequest, _):
            guard let request = AuthorizationRequest.open(sealedRequest, key: flowKey, now: now) else {
                return SignInRedirect(reason: reason, response: Page.response(status: 400, Page.staleAppForm))
            }
            return SignInRedirect(
                reason: reason,
                response: request.answer(
                    [("error", code.rawValue), ("error_description", description)], issuer: issuer, fromForm: false))
        case .device:
            return SignInRedirect(
                reason: reason,
                response: Page.response(
                    status: 400,
                    Page.message(title: "Sign-in failed", text: description + ". Start again from the device page.")))
        }
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

/// What a provider's callback vouched for: the identity, the provider, and what the sign-in was for.
struct VouchedSignIn: Sendable {
    let provider: ProviderID
    let identity: IdentityRecord
    let sealed: SealedSignIn
    /// What else the provider said of the account (``Identity/details``), recorded with the sign-in.
    var details: [String: String] = [:]
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
