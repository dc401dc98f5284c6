package import BrokerConfiguration
package import BrokerCore
package import BrokerCrypto
package import BrokerHTTP
package import BrokerStore
import BrokerSystem
import Glibc
package import Logging
package import ProviderSupport
import Synchronization

/// A response body with its status and headers, before it meets HTTP.
package struct APIResponse: Sendable {
    package var status: Int
    package var body: JSONValue
    var headers: [(String, String)] = []
    /// A page instead of JSON (``Page``): sent as it is, with the headers' own Content-Type.
    var html: String?
    /// ``body`` serialized already (with its final newline), for a document that changes rarely: sent as it is.
    package var serialized: [UInt8]?

    package init(
        status: Int, body: JSONValue, headers: [(String, String)] = [], html: String? = nil,
        serialized: [UInt8]? = nil
    ) {
        self.status = status
        self.body = body
        self.headers = headers
        self.html = html
        self.serialized = serialized
    }

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
/// (``AccountService``), CI minting (``ClientService``) and the rest. This type builds the graph from the
/// configuration (the one place that does, for production and the in-process tests alike) and runs the periodic
/// work; the router hands each feature's routes only the services they use (``BrokerHTTPServer/router``).
package final class BrokerService: ContextualService {
    /// A provider's secret file (`client_secret_file`, `private_key_file`), `~` expanded.
    static let readSecretFile: @Sendable (String) throws(ProviderError) -> String = { path throws(ProviderError) in
        do throws(PosixFile.Failure) {
            return try PosixFile.readSecret(path: PosixFile.expandingTilde(path))
        } catch {
            throw .invalidResponse("cannot read \(path): \(error.reason)")
        }
    }

    /// The client id of sessions started by the `broker` CLI (a public client: no secret, RFC 8252).
    package static let cliClientID = TokenIssuer.cliClientID

    /// The token issuer, store, logger, metrics and audit trail every service shares (its configuration, clock
    /// and issuer derived from them).
    package let context: ServiceContext
    let accounts: AccountService
    package let signIn: SignInService
    let grants: GrantService
    package let clients: ClientService
    let passwords: PasswordService
    let verification: VerificationService
    let selfService: AccountSelfService
    let links: LinkService
    let secondFactorAccount: SecondFactorAccount
    let secondFactorRecovery: SecondFactorRecovery
    let devices: DeviceService
    /// A provider's callback, ended by the feature that asked for the sign-in.
    let signInCallback: SignInCallback
    /// The OpenID Provider: `/auth/authorize` and its pages, and apps' tokens and userinfo.
    let authorization: AuthorizationService
    /// `/account`, on the browser session.
    let accountPage: AccountPageService
    package let appTokens: AppTokenService
    /// `POST /auth/clients` (RFC 7591).
    package let registrations: RegistrationService
    /// Passkeys: their ceremonies, pages and account API.
    package let passkeys: PasskeyService
    /// Sends the back-channel logouts the store queues.
    package let backchannel: BackchannelLogout
    /// `POST /auth/token`, and the DPoP binding of every request that issues tokens.
    let tokenEndpoint: TokenEndpoint
    /// The discovery document and the JWKS.
    package let discovery: DiscoveryService
    /// Sends reset mail; `nil` without a `mail` section.
    package let mailer: Mailer?
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
            idTokens: (idTokens, vault), retention: retention, now: now)
        return try BrokerService(
            configuration: configuration, providers: providers, store: store, keys: keys, logger: logger,
            hasher: hasher,
            clientSecretHasher: ClientSecretHasher(key: try await vault.secretKey("client-secrets", now: now)),
            flowKey: try await vault.secretKey("flow-state", now: now),
            pairwiseKey: try await vault.secretKey("pairwise-subjects", now: now),
            secondFactorKey: try await vault.secretKey("second-factors", now: now), clock: clock, http: http,
            metrics: metrics,
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
        pairwiseKey: [UInt8],
        secondFactorKey: [UInt8],
        clock: any WallClock,
        http: @escaping @Sendable () -> any HTTPTransport,
        metrics: BrokerMetrics,
        audit: AuditTrail,
        mailPassword: Secret?,
        mailBackoff: @escaping @Sendable (Int) -> Duration
    ) throws {
        let tokens = TokenIssuer(
            configuration: configuration, store: store, keys: keys, clock: clock,
            dpopNonceKey: HMAC.authenticate(.sha256, key: flowKey, data: Array("dpop-nonce-key".utf8)),
            pairwiseKey: pairwiseKey)
        var context = ServiceContext(tokens: tokens, store: store, logger: logger, metrics: metrics, audit: audit)
        // Apps that describe themselves at their client_id URL: fetched under the limits the service sets on each
        // request, with the operator's CA bundle.
        let caFile = configuration.caFile
        let documents = ClientMetadataDocuments(
            context: context, http: { PrivateCATransport(base: http(), caFile: caFile) })
        context.documents = { try await documents.app($0) }
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
        let throttle =
            configuration.loginThrottle
            ? LoginThrottle(table: store.isShared ? .store(store) : .memory, clock: clock) : nil
        accounts = try AccountService(
            context: context, hasher: hasher, pool: hashingPool, throttle: throttle, verification: verification,
            secondFactors: SecondFactorService(
                context: context, key: secondFactorKey, flowKey: flowKey, throttle: throttle, mailer: mailer))
        // Providers and trusted issuers: one time limit for every call, the operator's (`server.http_timeout`).
        let timeout = Duration.seconds(configuration.httpTimeout)
        let outbound: @Sendable () -> any HTTPTransport = {
            TimeLimitedTransport(base: http(), timeout: timeout, caFile: caFile)
        }
        clients = try ClientService(
            context: context, clientSecrets: clientSecretHasher,
            trustedKeys: IssuerDirectory(http: outbound, clock: clock, logger: logger))
        signIn = SignInService(
            context: context,
            identityProviders: try SignInService.makeProviders(
                configuration, from: providers,
                context: ProviderContext(
                    http: outbound, clock: clock,
                    directory: IssuerDirectory(http: outbound, clock: clock, logger: logger, freshFor: 3600),
                    readSecretFile: Self.readSecretFile)),
            flowKey: flowKey, icons: try ProviderIcon.load(configuration))
        let passkeys = PasskeyService(context: context, flowKey: flowKey)
        self.passkeys = passkeys
        devices = DeviceService(context: context, accounts: accounts, signIn: signIn, passkeys: passkeys)
        grants = GrantService(context: context, clients: clients, devices: devices)
        passwords = PasswordService(accounts: accounts, grants: grants, mailer: mailer)
        selfService = AccountSelfService(accounts: accounts, grants: grants)
        links = LinkService(accounts: accounts, grants: grants, signIn: signIn)
        secondFactorAccount = SecondFactorAccount(accounts: accounts)
        secondFactorRecovery = SecondFactorRecovery(accounts: accounts)
        let backchannel = BackchannelLogout(
            context: context, http: { PrivateCATransport(base: http(), caFile: caFile) })
        self.backchannel = backchannel
        // Apps' registered keys, for their client assertions and their signed request objects alike: one cache
        // of each app's jwks_uri.
        let assertions = ClientAssertions(
            context: context, keys: IssuerDirectory(http: outbound, clock: clock, logger: logger),
            registeredKeys: IssuerDirectory(http: outbound, clock: clock, logger: logger, publicAddressesOnly: true),
            secrets: clientSecretHasher)
        let authorization = AuthorizationService(
            context: context, accounts: accounts, signIn: signIn, flowKey: flowKey, backchannel: backchannel,
            passkeys: passkeys, requestObjects: RequestObjects(context: context, http: outbound, keys: assertions))
        self.authorization = authorization
        accountPage = AccountPageService(
            authorization: authorization, links: links, passkeys: passkeys, selfService: selfService)
        signInCallback = SignInCallback(
            signIn: signIn, authorization: authorization, links: links, devices: devices)
        let appTokens = AppTokenService(context: context, secrets: clientSecretHasher, assertions: assertions)
        self.appTokens = appTokens
        registrations = RegistrationService(context: context, secrets: clientSecretHasher, http: outbound)
        tokenEndpoint = TokenEndpoint(context: context, grants: grants, appTokens: appTokens, clients: clients)
        discovery = DiscoveryService(context: context)
    }

    /// The issuer (`iss`, and the base of every URL in discovery).
    package var issuer: String { tokens.issuer }

    /// Sets the issuer once the port is known (`--port 0`), unless one was configured.
    package func serverStarted(host: String, port: Int) {
        tokens.serverStarted(host: host, port: port)
        // Said once, at start, with the key to set (issue "Passkeys" §4).
        if case .off(let reason) = passkeys.settings { logger.notice("\(reason)") }
    }

    var now: Int64 { tokens.now }
    package var keys: KeyManager { tokens.keys }

    /// What `GET /metrics` answers with.
    package var exposition: MetricsExposition {
        MetricsExposition(metrics: metrics, tokens: tokens, hashingPool: hashingPool)
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

}

enum System {
    static var coreCount: Int {
        return Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
    }
}
