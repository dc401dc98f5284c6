package import BrokerConfiguration
package import BrokerCore
package import BrokerCrypto
package import BrokerHTTP
package import BrokerStore
import Glibc
package import Logging
package import ProviderSupport
import Synchronization

/// A response body with its status and headers, before it meets HTTP.
struct APIResponse: Sendable {
    var status: Int
    var body: JSONValue
    var headers: [(String, String)] = []
    /// A page instead of JSON (``Page``): sent as it is, with the headers' own Content-Type.
    var html: String?
    /// ``body`` serialized already (with its final newline), for a document that changes rarely: sent as it is.
    var serialized: [UInt8]?

    /// Token responses must not be cached (RFC 6749 §5.1).
    static func tokens(_ body: JSONValue, status: Int = 200) -> APIResponse {
        APIResponse(status: status, body: body, headers: [("Cache-Control", "no-store"), ("Pragma", "no-cache")])
    }

    /// A 302 to `location`, never cached (the URL carries a state or a one-time code).
    static func redirect(_ location: String) -> APIResponse {
        APIResponse(status: 302, body: .object([:]), headers: [("Location", location), ("Cache-Control", "no-store")])
    }
}

/// The broker's behaviour, independent of HTTP, as services around one token issuer: browser sign-in
/// (``SignInService``), grants, revocation and `/auth/me` (``GrantService``), custom accounts
/// (``AccountService``) and CI minting (``ClientService``). This type builds them from the configuration and
/// answers the documents that belong to no one service (discovery, JWKS, providers, health).
package final class BrokerService: ContextualService {
    /// The client id of sessions started by the `broker` CLI (a public client: no secret, RFC 8252).
    package static let cliClientID = TokenIssuer.cliClientID

    /// The token issuer, store, logger, metrics and audit trail every service shares (its configuration, clock
    /// and issuer derived from them).
    let context: ServiceContext
    let accounts: AccountService
    let signIn: SignInService
    let grants: GrantService
    let clients: ClientService
    let passwords: PasswordService
    let verification: VerificationService
    let selfService: AccountSelfService
    let links: LinkService
    let devices: DeviceService
    /// The OpenID Provider: `/auth/authorize` and its pages, and apps' tokens and userinfo.
    let authorization: AuthorizationService
    let appTokens: AppTokenService
    /// Passkeys: their ceremonies, pages and account API.
    let passkeys: PasskeyService
    /// Sends the back-channel logouts the store queues.
    let backchannel: BackchannelLogout
    /// Sends reset mail; `nil` without a `mail` section.
    let mailer: Mailer?
    let hashingPool: HashingPool

    /// Builds the broker on `store`: loads (or creates, or imports from the data directory) the keys sealed
    /// under the master key, and the services around them.
    /// - Parameters:
    ///   - signingKey: a key given with `--signing-key` (the only key), else the store's key ring.
    ///   - master: the key that seals the store's keys (``MasterKey/load(configuration:environment:store:)``).
    ///   - clock: seconds since the epoch; injected so that tests control expiry and back-off.
    ///   - providers: the provider modules this build offers (the executable's `BrokerProviders.all`); those the
    ///     configuration enables are built.
    ///   - http: the outbound transport of provider modules and the token exchange (scripted in tests).
    package static func open(
        configuration: ServerConfiguration,
        providers: [ProviderDescriptor],
        store: any Store,
        signingKey: AsymmetricKey? = nil,
        master: MasterKey,
        logger: Logger,
        hasher: PasswordHasher = PasswordHasher(),
        clock: any WallClock,
        http: @escaping @Sendable () -> any HTTPTransport = { HTTPClient.shared },
        metrics: BrokerMetrics = BrokerMetrics(),
        audit: AuditTrail? = nil,
        mailPassword: Secret? = nil,
        mailBackoff: @escaping @Sendable (Int) -> Duration = { .seconds(5 << min($0, 6)) },
        newIDTokenKey: @escaping @Sendable () throws -> AsymmetricKey = { try AsymmetricKey.generate(.rsa(bits: 2048)) }
    ) async throws -> BrokerService {
        let audit = try audit ?? AuditTrail(destination: .discard, clock: clock)
        // Each store reports its calls' durations from its own choke points.
        store.observe(metrics)
        let now = clock.seconds()
        let retention = max(configuration.accessTokenTTL, configuration.mintMaxTTL) + 60
        let vault = KeyVault(
            store: store, master: master,
            legacyDataDirectory: store.isShared ? nil : configuration.expandedDataDirectory)
        let idTokens = try await vault.idTokenKeys(now: now, generate: newIDTokenKey)
        let keys = try await KeyManager.make(
            source: signingKey.map { .external($0) } ?? .vault(vault),
            idTokens: (idTokens.keys, idTokens.stamp, vault), retention: retention, now: now)
        return try BrokerService(
            configuration: configuration, providers: providers, store: store, keys: keys, logger: logger,
            hasher: hasher,
            clientSecretHasher: ClientSecretHasher(key: try await vault.secretKey("client-secrets", now: now)),
            flowKey: try await vault.secretKey("flow-state", now: now), clock: clock, http: http, metrics: metrics,
            audit: audit, mailPassword: mailPassword, mailBackoff: mailBackoff)
    }

    private init(
        configuration: ServerConfiguration,
        providers: [ProviderDescriptor],
        store: any Store,
        keys: KeyManager,
        logger: Logger,
        hasher: PasswordHasher,
        clientSecretHasher: ClientSecretHasher,
        flowKey: [UInt8],
        clock: any WallClock,
        http: @escaping @Sendable () -> any HTTPTransport,
        metrics: BrokerMetrics,
        audit: AuditTrail,
        mailPassword: Secret?,
        mailBackoff: @escaping @Sendable (Int) -> Duration
    ) throws {
        let tokens = TokenIssuer(
            configuration: configuration, store: store, keys: keys, clock: clock,
            dpopNonceKey: HMAC.authenticate(.sha256, key: flowKey, data: Array("dpop-nonce-key".utf8)))
        let context = ServiceContext(tokens: tokens, store: store, logger: logger, metrics: metrics, audit: audit)
        self.context = context
        let workers = configuration.passwordHashWorkers ?? max(1, System.coreCount)
        hashingPool = HashingPool(
            workers: workers, queueLimit: configuration.passwordHashQueue ?? 4 * workers, metrics: metrics)
        var mailer: Mailer?
        if let mail = configuration.mail {
            mailer = try Mailer(
                configuration: mail, password: mailPassword, issuer: { [tokens] in tokens.issuer }, logger: logger,
                metrics: metrics,
                clock: clock, backoff: mailBackoff)
        }
        self.mailer = mailer
        verification = VerificationService(context: context, mailer: mailer)
        accounts = try AccountService(
            context: context, hasher: hasher, pool: hashingPool,
            throttle: configuration.loginThrottle
                ? LoginThrottle(table: store.isShared ? .store(store) : .memory, clock: clock) : nil,
            verification: verification)
        // Providers and trusted issuers: one time limit for every call, the operator's (`server.http_timeout`).
        let timeout = Duration.seconds(configuration.httpTimeout)
        let outbound: @Sendable () -> any HTTPTransport = { TimeLimitedTransport(base: http(), timeout: timeout) }
        clients = try ClientService(
            context: context, clientSecrets: clientSecretHasher,
            trustedKeys: IssuerDirectory(http: outbound, clock: clock, logger: logger))
        signIn = SignInService(
            context: context,
            identityProviders: try SignInService.makeProviders(
                configuration, from: providers,
                context: ProviderContext(
                    http: outbound, clock: clock,
                    directory: IssuerDirectory(http: outbound, clock: clock, logger: logger, freshFor: 3600))),
            flowKey: flowKey)
        let passkeys = PasskeyService(context: context, flowKey: flowKey)
        self.passkeys = passkeys
        devices = DeviceService(context: context, accounts: accounts, signIn: signIn, passkeys: passkeys)
        grants = GrantService(context: context, clients: clients, devices: devices)
        passwords = PasswordService(accounts: accounts, grants: grants, mailer: mailer)
        selfService = AccountSelfService(accounts: accounts, grants: grants)
        links = LinkService(accounts: accounts, grants: grants, signIn: signIn)
        let backchannel = BackchannelLogout(context: context, http: http)
        self.backchannel = backchannel
        let authorization = AuthorizationService(
            context: context, accounts: accounts, signIn: signIn, flowKey: flowKey, backchannel: backchannel,
            passkeys: passkeys)
        self.authorization = authorization
        signIn.appSignIns.set { user, provider, request in
            try await authorization.providerSignedIn(user: user, provider: provider, sealedRequest: request)
        }
        appTokens = AppTokenService(context: context, secrets: clientSecretHasher)
    }

    /// Runs a request that issues tokens (`/auth/token`, `/auth/login`, `/auth/register`) under the key its DPoP
    /// proof proved (``DPoPRequest/current``, set by ``ErrorAndLogMiddleware``), if it sent one: the proof is
    /// checked (RFC 9449 §4.3, no `ath`) and what the request issues is bound to its key — the access token
    /// always, the session (its refresh token) for public clients: the broker CLI and public apps.
    nonisolated(nonsending) func bound(
        input: RequestInput, authorization: String?,
        _ issue: nonisolated(nonsending) @Sendable () async throws -> APIResponse
    ) async throws -> APIResponse {
        guard let request = DPoPRequest.current else { return try await issue() }
        let proof: DPoPChecker.Proof
        do {
            proof = try await tokens.dpop.check(
                request.proofs, method: request.method, url: issuer + request.path, accessToken: nil, now: now)
        } catch {
            metrics.dpop(outcome: error.code.rawValue)
            throw error.tokenEndpointError
        }
        metrics.dpop(outcome: "bound")
        var bindsSession = true
        // A confidential app's refresh token is held by its secret (RFC 9449 §5); a public app's by the key.
        if AppTokenService.isAppRequest(input, authorization: authorization),
            let named = (try? clients.presentedClient(input, authorization: authorization))?.id,
            let app = try await app(clientID: named)
        {
            bindsSession = app.isPublic
        }
        var response = try await DPoPBinding.$current.withValue(
            DPoPBinding.Key(thumbprint: proof.thumbprint, bindsSession: bindsSession)
        ) { try await issue() }
        // Issued: only now is the proof's jti written (RT3-8), so that a proof sent with a refresh token, code
        // or password that is refused anyway writes nothing to the store. Two requests with one proof at the same
        // moment both reached the grant; each grant is single-use (a code, a rotation) or needs the client's own
        // secret or password, and the one that loses this write is refused.
        do {
            try await tokens.dpop.spend(proof)
        } catch {
            metrics.dpop(outcome: error.code.rawValue)
            throw error.tokenEndpointError
        }
        if tokens.configuration.dpopNonce { response.headers.append(("DPoP-Nonce", tokens.dpop.nonce(now: now))) }
        return response
    }

    /// `POST /auth/token`: an app's code grant goes to ``AppTokenService``, everything else to ``GrantService``.
    nonisolated(nonsending) func token(_ input: RequestInput, authorization: String?) async throws -> APIResponse {
        let grant = try input.string("grant_type")
        if grant == "authorization_code", AppTokenService.isAppRequest(input, authorization: authorization) {
            return try await metrics.counting(success: "issued", { self.metrics.appToken(outcome: $0) }) {
                try await appTokens.authorizationCode(input, authorization: authorization)
            }
        }
        if grant == "refresh_token", AppTokenService.isAppRequest(input, authorization: authorization) {
            let app = try await appTokens.authenticate(input, authorization: authorization)
            return try await grants.refresh(input, client: app)
        }
        return try await grants.token(input, authorization: authorization)
    }

    /// The issuer (`iss`, and the base of every URL in discovery).
    package var issuer: String { tokens.issuer }

    /// Whether the broker is reached over https (cookies are then `Secure`).
    var issuerIsHTTPS: Bool { tokens.issuer.lowercased().hasPrefix("https://") }

    /// Sets the issuer once the port is known (`--port 0`), unless one was configured.
    package func serverStarted(host: String, port: Int) {
        tokens.serverStarted(host: host, port: port)
        // Said once, at start, with the key to set (issue "Passkeys" §4).
        if case .off(let reason) = passkeys.settings { logger.notice("\(reason)") }
    }

    var now: Int64 { tokens.now }
    var keys: KeyManager { tokens.keys }

    /// `GET /metrics`: the Prometheus text exposition.
    func metricsExposition() -> [UInt8] {
        metrics.exposition(
            signingKeyCreatedAt: keys.current.ring.current.createdAt, hashQueueDepth: hashingPool.queued, now: now)
    }

    /// Re-reads keys and drops expired refresh tokens; called periodically by the server.
    package func maintain() async {
        audit.tick()
        do {
            if try await keys.refresh(now: now) {
                logger.info("signing keys changed", metadata: ["broker.kid": "\(keys.current.ring.current.kid)"])
            }
        } catch {
            logger.error("cannot reload the signing keys; keeping the current ones", metadata: ["error": "\(error)"])
        }
    }

    package func purgeExpired() async {
        do {
            try await store.purge(expiredBefore: now - 86_400, shortLivedBefore: now)
        } catch {
            logger.warning("purge of expired refresh tokens failed", metadata: ["error": "\(error)"])
        }
        guard configuration.auditStore else { return }
        do {
            let gone = try await store.purgeAuditEvents(before: now - configuration.auditRetention)
            if gone > 0 { logger.info("audit events past their retention deleted", metadata: ["count": "\(gone)"]) }
        } catch {
            logger.warning("purge of old audit events failed", metadata: ["error": "\(error)"])
        }
    }

    // MARK: Discovery

    /// The algorithms access tokens are signed with: the key ring's.
    var accessTokenAlgorithms: [String] {
        var algorithms: [String] = []
        for entry in keys.current.ring.published(now: now, retention: keys.retention)
        where !algorithms.contains(entry.key.algorithm.rawValue) {
            algorithms.append(entry.key.algorithm.rawValue)
        }
        return algorithms
    }

    /// The algorithms an app's id tokens may be signed with: RS256 (which OpenID Connect requires) and the
    /// ring's current key's.
    var idTokenAlgorithms: [String] {
        var algorithms = keys.current.idTokenSigner == nil ? [] : ["RS256"]
        let current = keys.current.ring.current.key.algorithm.rawValue
        if !algorithms.contains(current) { algorithms.append(current) }
        return algorithms
    }

    /// The discovery document as last made, with the issuer and the algorithms it lists: made again only when one
    /// of them changes (the issuer is set once the port is bound; a key rotates into or out of the published set),
    /// so a request for it serializes nothing, and every connection's prepared answer (``ConstantDocumentHandler``)
    /// stays while the bytes are the same array.
    private let madeDiscovery = Mutex<(from: DiscoveryInputs, response: APIResponse)?>(nil)

    /// What the discovery document changes with.
    private struct DiscoveryInputs: Equatable {
        let issuer: String
        let idTokenAlgorithms: [String]
        let accessTokenAlgorithms: [String]
    }

    func discovery() -> APIResponse {
        let inputs = DiscoveryInputs(
            issuer: issuer, idTokenAlgorithms: idTokenAlgorithms, accessTokenAlgorithms: accessTokenAlgorithms)
        if let kept = madeDiscovery.withLock({ $0 }), kept.from == inputs { return kept.response }
        var response = discovery(inputs)
        response.serialized = response.body.serializedBytes + [UInt8(ascii: "\n")]
        madeDiscovery.withLock { $0 = (inputs, response) }
        return response
    }

    private func discovery(_ inputs: DiscoveryInputs) -> APIResponse {
        let base = inputs.issuer
        let document: JSONValue = .object([
            "issuer": .string(base),
            "jwks_uri": .string(base + "/.well-known/jwks.json"),
            "token_endpoint": .string(base + "/auth/token"),
            "revocation_endpoint": .string(base + "/auth/revoke"),
            "device_authorization_endpoint": .string(base + "/auth/device"),
            "userinfo_endpoint": .string(base + "/auth/userinfo"),
            "authorization_endpoint": .string(base + "/auth/authorize"),
            "introspection_endpoint": .string(base + "/auth/introspect"),
            "end_session_endpoint": .string(base + "/auth/end-session"),
            "dpop_signing_alg_values_supported": .array(DPoPChecker.algorithms.map(JSONValue.string)),
            "backchannel_logout_supported": true,
            "backchannel_logout_session_supported": true,
            "pushed_authorization_request_endpoint": .string(base + "/auth/par"),
            "require_pushed_authorization_requests": .bool(configuration.requirePAR),
            "introspection_endpoint_auth_methods_supported": .array(["client_secret_basic", "client_secret_post"]),
            "grant_types_supported": .array(Self.grantTypes.map(JSONValue.string)),
            "response_types_supported": .array(["code"]),
            "subject_types_supported": .array(["public"]),
            "code_challenge_methods_supported": .array(["S256"]),
            "token_endpoint_auth_methods_supported": .array(["none", "client_secret_basic", "client_secret_post"]),
            "revocation_endpoint_auth_methods_supported": .array(["none"]),
            "id_token_signing_alg_values_supported": .array(inputs.idTokenAlgorithms.map(JSONValue.string)),
            "access_token_signing_alg_values_supported": .array(inputs.accessTokenAlgorithms.map(JSONValue.string)),
            "userinfo_signing_alg_values_supported": .array(["none"]),
            "scopes_supported": .array(AppRules.standardScopes.map(JSONValue.string)),
            "response_modes_supported": .array(["query"]),
            "prompt_values_supported": .array(["none", "login", "consent", "select_account"]),
            "claims_parameter_supported": false,
            "request_parameter_supported": false,
            "request_uri_parameter_supported": false,
            "authorization_response_iss_parameter_supported": true,
            "claims_supported": .array(
                [
                    "iss", "sub", "aud", "iat", "nbf", "exp", "jti", "idp", "client_id", "sid", "email",
                    "email_verified", "name", "scope", "auth_time", "nonce", "at_hash", "azp", "amr",
                ].map(JSONValue.string)
            ),
        ])
        return APIResponse(status: 200, body: document, headers: [("Cache-Control", "public, max-age=300")])
    }

    static let grantTypes = [
        "authorization_code", "refresh_token", "client_credentials", ClientService.tokenExchangeGrant,
        DeviceService.grantType,
    ]

    func jwks() -> APIResponse {
        // Short caching: a verifier that meets an unknown kid refetches anyway.
        let current = keys.current
        return APIResponse(
            status: 200, body: current.jwks, headers: [("Cache-Control", "public, max-age=60")],
            serialized: current.jwksBytes)
    }

    func providers() -> APIResponse {
        var list: [ProvidersResponse.Entry] = configuration.enabledProviders.filter {
            $0 == .custom || signIn.identityProviders[$0] != nil
        }.map { id in
            let schema = configuration.schema(id)
            return ProvidersResponse.Entry(
                id: id.rawValue, name: schema?.displayName ?? "Email and password",
                flow: (schema?.flow ?? .password).rawValue)
        }
        // A passkey signs in through the broker's own page (the CLI's loopback flow): listed when passkeys are on.
        if passkeys.enabled { list.append(ProvidersResponse.Entry(id: "passkey", name: "Passkey", flow: "browser")) }
        return APIResponse(status: 200, body: ProvidersResponse(providers: list).json)
    }

    func health() async -> APIResponse {
        do {
            try await store.ping()
            return APIResponse(status: 200, body: .object(["status": "ok"]))
        } catch {
            logger.error("health check: the store does not answer", metadata: ["error": "\(error)"])
            return APIResponse(status: 503, body: .object(["status": "unavailable", "error": "server_error"]))
        }
    }
}

enum System {
    static var coreCount: Int {
        return Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
    }
}
