import BrokerConfiguration
package import BrokerCore
import BrokerCrypto
import BrokerStore
import HTTPTypes
import Hummingbird
import HummingbirdCore
package import Logging
import NIOCore
import NIOHTTP1
import ServiceLifecycle
import UnixSignals

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The request context: Hummingbird's core storage plus the peer address (login throttling per address).
struct BrokerRequestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?
    /// The client this request stands for: the peer, or with a trusted proxy the address it forwarded
    /// (``TrustedProxies/client(peer:forwardedFor:)``, set by ``ErrorAndLogMiddleware``).
    var clientAddress: String?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
        clientAddress = remoteAddress?.ipAddress
    }

    var maxUploadSize: Int { RequestInput.maxBodySize }

    /// This request's id (`X-Request-Id`), set by ``ErrorAndLogMiddleware``.
    var requestID = "-"
}

/// Turns every error into the contract's JSON error body, and logs each request without its query,
/// headers or body (where codes, tokens and passwords travel).
///
/// Every response carries `X-Request-Id`: the request's own when it is a sane value (``RequestID``), else a new
/// one; the log line carries it too. Each request is counted in the metrics under its route template.
struct ErrorAndLogMiddleware: RouterMiddleware {
    typealias Context = BrokerRequestContext
    let logger: Logger
    var metrics: BrokerMetrics?
    /// Peers whose `X-Forwarded-For` names the client (`server.trusted_proxies`).
    var trustedProxies = TrustedProxies()

    static let forwardedFor: HTTPField.Name = {
        guard let name = HTTPField.Name("X-Forwarded-For") else { preconditionFailure("a valid field name") }
        return name
    }()

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let started = ContinuousClock.now
        var context = context
        context.requestID = RequestID.accepting(request.headers[RequestID.field]) ?? RequestID.make()
        if !trustedProxies.networks.isEmpty {
            context.clientAddress = trustedProxies.client(
                peer: context.remoteAddress?.ipAddress, forwardedFor: request.headers[values: Self.forwardedFor])
        }
        var response: Response
        let origin = RequestOrigin(
            address: context.clientAddress, userAgent: request.headers[.userAgent], requestID: context.requestID)
        do {
            response = try await RequestOrigin.$current.withValue(origin) { [context] in
                try await next(request, context)
            }
        } catch let error as APIError {
            response = BrokerHTTPServer.response(error)
        } catch let error as any HTTPResponseError {
            response = BrokerHTTPServer.response(Self.apiError(status: error.status))
        } catch let error as StoreError where error.code == .unavailable {
            // The database is down or slow: the client may retry; the reason goes to the log only.
            logger.error("store unavailable", metadata: ["http.path": "\(request.uri.path)", "error": "\(error)"])
            response = BrokerHTTPServer.response(
                APIError(
                    status: 503, code: .serverError,
                    detail: "the broker's database is unavailable; try again shortly",
                    headers: [("Retry-After", "1")]))
        } catch let error as HTTPParserError {
            // A malformed body (a bad or overflowing chunk size, an unknown transfer coding) is the client's
            // mistake: 400, and not worth more than a debug line.
            logger.debug("malformed request", metadata: ["http.path": "\(request.uri.path)", "error": "\(error)"])
            response = BrokerHTTPServer.response(APIError.invalidRequest("malformed HTTP request body"))
        } catch {
            logger.error(
                "request failed",
                metadata: ["http.path": "\(request.uri.path)", "error": "\(String(describing: type(of: error)))"]
            )
            response = BrokerHTTPServer.response(APIError.serverError)
        }
        let elapsed = ContinuousClock.now - started
        response.headers[RequestID.field] = context.requestID
        // The route template, never the path: `/auth/:provider/start`, or `unmatched` for a 404 of the router.
        let route = context.endpointPath.flatMap { $0 == "NotFound" ? nil : $0 } ?? "unmatched"
        metrics?.request(route: route, method: request.method.rawValue, status: response.status.code, duration: elapsed)
        logger.info(
            "request",
            metadata: [
                "request_id": "\(context.requestID)",
                "http.method": "\(request.method.rawValue)",
                "http.path": "\(request.uri.path.prefix(200))",
                "http.status": "\(response.status.code)",
                "duration_ms":
                    "\(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)",
            ]
        )
        return response
    }

    static func apiError(status: HTTPResponse.Status) -> APIError {
        switch status.code {
        case 404: APIError.notFound("no such endpoint")
        case 405: APIError.methodNotAllowed("method not allowed on this endpoint")
        case 413: APIError.payloadTooLarge(limit: RequestInput.maxBodySize)
        case 400..<500: APIError(status: status.code, code: .invalidRequest, detail: status.reasonPhrase)
        default: APIError.serverError
        }
    }
}

/// The broker's HTTP surface on Hummingbird.
package enum BrokerHTTPServer {
    static func response(_ error: APIError) -> Response {
        response(APIResponse(status: error.status, body: error.body, headers: error.headers))
    }

    static func response(_ api: APIResponse) -> Response {
        var headers = HTTPFields()
        if api.html == nil { headers[.contentType] = "application/json" }
        for (name, value) in api.headers {
            if let field = HTTPField.Name(name) { headers.append(HTTPField(name: field, value: value)) }
        }
        var bytes = api.html.map { Array($0.utf8) } ?? api.body.serializedBytes
        bytes.append(UInt8(ascii: "\n"))
        return Response(
            status: HTTPResponse.Status(code: api.status),
            headers: headers,
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes))
        )
    }

    /// Reads a body of at most ``RequestInput/maxBodySize`` bytes and parses it.
    static func input(_ request: Request, allowForm: Bool) async throws -> RequestInput {
        if let declared = request.headers[.contentLength].flatMap(Int.init), declared > RequestInput.maxBodySize {
            throw APIError.payloadTooLarge(limit: RequestInput.maxBodySize)
        }
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: RequestInput.maxBodySize)
        } catch is NIOTooManyBytesError {
            throw APIError.payloadTooLarge(limit: RequestInput.maxBodySize)
        }
        return try RequestInput.parse(
            body: Array(buffer.readableBytesView),
            contentType: request.headers[.contentType],
            allowForm: allowForm
        )
    }

    /// The query's parameters, strictly: percent-decoded, UTF-8, none repeated.
    static func query(_ request: Request) throws -> [String: String] {
        guard let text = request.uri.query, !text.isEmpty else { return [:] }
        guard text.utf8.count <= 8192, let pairs = FormEncoding.decode(text) else {
            throw APIError.invalidRequest("malformed query string")
        }
        var fields: [String: String] = [:]
        for (name, value) in pairs {
            guard fields.updateValue(value, forKey: name) == nil else {
                throw APIError.invalidRequest("parameter \"\(name.prefix(64))\" is repeated")
            }
        }
        return fields
    }

    static func router(
        service: BrokerService, logger: Logger, metrics: MetricsEndpoint = MetricsEndpoint()
    ) -> Router<BrokerRequestContext> {
        let router = Router(context: BrokerRequestContext.self)
        router.middlewares.add(
            ErrorAndLogMiddleware(
                logger: logger, metrics: service.metrics, trustedProxies: service.configuration.trustedProxies))
        router.middlewares.add(DPoPContextMiddleware())
        if metrics.port == nil {
            router.get("/metrics") { request, _ in metricsResponse(request, service: service, token: metrics.token) }
        }
        router.get("/.well-known/openid-configuration") { _, _ in response(service.discovery()) }
        router.get("/.well-known/jwks.json") { _, _ in response(service.jwks()) }
        router.get("/auth/providers") { _, _ in response(service.providers()) }
        router.get("/healthz") { _, _ in response(await service.health()) }
        router.post("/auth/register") { request, context in
            let body = try await input(request, allowForm: false)
            return try await response(
                service.bound(input: body, authorization: nil) {
                    try await service.accounts.register(body, address: context.clientAddress)
                })
        }
        router.post("/auth/login") { request, context in
            let body = try await input(request, allowForm: false)
            return try await response(
                service.bound(input: body, authorization: nil) {
                    try await service.accounts.login(body, address: context.clientAddress)
                })
        }
        router.post("/auth/token") { request, _ in
            let body = try await input(request, allowForm: true)
            let authorization = request.headers[.authorization]
            return try await response(
                service.bound(input: body, authorization: authorization) {
                    try await service.token(body, authorization: authorization)
                })
        }
        router.addRoutes(OpenIDProviderRoutes.collection(service))
        router.addRoutes(PasskeyRoutes.collection(service))
        router.post("/auth/revoke") { request, _ in
            try await response(service.grants.revoke(input(request, allowForm: true)))
        }
        router.get("/auth/:provider/start") { request, context in
            try await response(
                service.signIn.startBrowserSignIn(
                    provider: context.parameters.get("provider") ?? "", query: try query(request),
                    address: context.clientAddress))
        }
        router.get("/auth/:provider/callback") { request, context in
            try await response(
                service.signIn.completeBrowserSignIn(
                    provider: context.parameters.get("provider") ?? "", query: try query(request),
                    cookie: request.headers[.cookie], address: context.clientAddress))
        }
        router.get("/auth/me") { request, _ in
            try await response(
                service.grants.me(authorization: request.headers[.authorization]))
        }
        router.post("/auth/account/delete") { request, context in
            try await response(
                service.selfService.delete(
                    input(request, allowForm: false), authorization: request.headers[.authorization],
                    address: context.clientAddress))
        }
        router.get("/auth/account/export") { request, _ in
            try await response(service.selfService.export(authorization: request.headers[.authorization]))
        }
        router.post("/auth/device") { request, context in
            try await response(
                service.devices.authorize(
                    input(request, allowForm: true), address: context.clientAddress,
                    authorization: request.headers[.authorization]))
        }
        router.get("/device") { request, context in
            try await response(service.devices.page(query: try query(request), address: context.clientAddress))
        }
        router.post("/auth/device/signin") { request, context in
            try await response(
                service.devices.startSignIn(
                    input(request, allowForm: true), cookie: request.headers[.cookie], address: context.clientAddress))
        }
        router.post("/auth/device/password") { request, context in
            try await response(
                service.devices.passwordSignIn(
                    input(request, allowForm: true), cookie: request.headers[.cookie], address: context.clientAddress))
        }
        router.post("/auth/device/decision") { request, _ in
            try await response(
                service.devices.decide(input(request, allowForm: true), cookie: request.headers[.cookie]))
        }
        router.get("/auth/identities") { request, _ in
            try await response(service.links.identities(authorization: request.headers[.authorization]))
        }
        router.post("/auth/link") { request, context in
            try await response(
                service.links.link(
                    input(request, allowForm: false), authorization: request.headers[.authorization],
                    address: context.clientAddress))
        }
        router.post("/auth/unlink") { request, _ in
            try await response(
                service.links.unlink(input(request, allowForm: false), authorization: request.headers[.authorization]))
        }
        router.get("/auth/verify") { request, _ in
            try await response(service.verification.page(query: try query(request), secure: service.issuerIsHTTPS))
        }
        router.post("/auth/verify") { request, _ in
            try await response(
                service.verification.confirm(
                    input(request, allowForm: true), cookie: request.headers[.cookie], secure: service.issuerIsHTTPS))
        }
        router.post("/auth/verify/resend") { request, context in
            try await response(
                service.verification.resend(input(request, allowForm: true), address: context.clientAddress))
        }
        router.post("/auth/password/forgot") { request, context in
            let form = try await input(request, allowForm: true)
            // The page's form (it carries a CSRF token) gets a page; the API its JSON.
            if (try? form.optionalString("csrf")) != nil {
                return try await response(
                    service.passwords.forgotForm(
                        form, cookie: request.headers[.cookie], address: context.clientAddress,
                        secure: service.issuerIsHTTPS))
            }
            return try await response(service.passwords.forgot(form, address: context.clientAddress))
        }
        router.get("/auth/password/reset") { request, _ in
            try await response(service.passwords.resetPage(query: try query(request), secure: service.issuerIsHTTPS))
        }
        router.post("/auth/password/reset") { request, _ in
            try await response(
                service.passwords.reset(
                    input(request, allowForm: true), cookie: request.headers[.cookie], secure: service.issuerIsHTTPS))
        }
        router.post("/auth/password/change") { request, context in
            try await response(
                service.passwords.change(
                    input(request, allowForm: false), authorization: request.headers[.authorization],
                    address: context.clientAddress))
        }
        return router
    }

    /// Runs the broker until SIGTERM or SIGINT, then stops accepting, finishes requests in flight and returns.
    ///
    /// - Parameters:
    ///   - limits: the connection cap and the per-request deadline (``ConnectionLimits``).
    ///   - onReady: called once with the bound host and port, when connections are accepted.
    package static func run(
        service: BrokerService,
        host: String,
        port: Int,
        limits: ConnectionLimits,
        metrics: MetricsEndpoint = MetricsEndpoint(),
        logger: Logger,
        onReady: @escaping @Sendable (String, Int) -> Void
    ) async throws {
        let router = router(service: service, logger: logger, metrics: metrics)
        // One descriptor budget for the whole process (RT2-9): the metrics listener's share is taken off the
        // top, so that neither listener can spend the descriptors the store, outbound requests, mail and the
        // other listener need.
        let nofile = DescriptorLimit.raiseToHardLimit()
        let descriptors = nofile - (metrics.port == nil ? 0 : ConnectionLimits.metricsAcceptLimit)
        let cap = limits.effectiveMaxConnections(descriptorLimit: descriptors)
        if cap < limits.maxConnections {
            logger.warning(
                "max_connections lowered to fit the descriptor limit",
                metadata: ["configured": "\(limits.maxConnections)", "in_force": "\(cap)", "nofile": "\(nofile)"]
            )
        }
        let counter = ConnectionCounter(limit: cap, perNetwork: limits.perAddress)
        let server = HTTPServerBuilder.http1(
            configuration: HTTP1Channel.Configuration(
                additionalChannelHandlers: [
                    ConnectionGuardHandler(counter: counter, limits: limits, logger: logger)
                ]
            )
        )
        var app = Application(
            router: router,
            server: server,
            configuration: ApplicationConfiguration(
                address: .hostname(host, port: port),
                serverName: nil,
                availableConnectionsDelegate: MaximumAvailableConnections(
                    limits.acceptLimit(descriptorLimit: descriptors))
            ),
            onServerRunning: { channel in
                let bound = channel.localAddress?.port ?? port
                service.serverStarted(host: host, port: bound)
                onReady(host, bound)
            },
            logger: logger
        )
        app.addServices(
            MaintenanceService(service: service), AuditReopenService(audit: service.audit, logger: logger),
            BackchannelLogoutService(sender: service.backchannel))
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [.init(service: app)]
        if let metricsPort = metrics.port {
            // `GET /metrics` alone on a port of its own (to keep it off a public listener).
            let metricsRouter = Router(context: BrokerRequestContext.self)
            metricsRouter.middlewares.add(ErrorAndLogMiddleware(logger: logger))
            metricsRouter.get("/metrics") { request, _ in
                metricsResponse(request, service: service, token: metrics.token)
            }
            // Guarded like the main port (RT2-9): the request deadline, a small cap of its own with quick 503s
            // above it, and a hard stop on accepting — idle connections to it can no longer fill the
            // descriptor table.
            let metricsLimits = ConnectionLimits(
                maxConnections: ConnectionLimits.metricsMaxConnections, requestTimeout: limits.requestTimeout)
            let metricsCounter = ConnectionCounter(limit: ConnectionLimits.metricsMaxConnections)
            services.append(
                .init(
                    service: Application(
                        router: metricsRouter,
                        server: HTTPServerBuilder.http1(
                            configuration: HTTP1Channel.Configuration(
                                additionalChannelHandlers: [
                                    ConnectionGuardHandler(
                                        counter: metricsCounter, limits: metricsLimits, logger: logger)
                                ]
                            )
                        ),
                        configuration: ApplicationConfiguration(
                            address: .hostname(metrics.host, port: metricsPort), serverName: nil,
                            availableConnectionsDelegate: MaximumAvailableConnections(
                                ConnectionLimits.metricsAcceptLimit)),
                        onServerRunning: { channel in
                            logger.info(
                                "metrics listening",
                                metadata: ["port": "\(channel.localAddress?.port ?? metricsPort)"])
                        },
                        logger: logger)))
        }
        // SIGTERM and SIGINT start a graceful shutdown: no new connections, requests in flight finish. It is
        // bounded: a request gets `request_timeout` seconds (and the store its own deadline), so after that
        // and five more the rest is cancelled rather than waited for, and the process exits.
        let bound = limits.requestTimeout + 5
        // Last in the list, so the first told: the group shuts its services down in reverse order.
        services.append(.init(service: ShutdownNotice(logger: logger, bound: bound)))
        var group = ServiceGroupConfiguration(
            services: services,
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger
        )
        group.maximumGracefulShutdownDuration = .seconds(bound)
        try await ServiceGroup(configuration: group).run()
        logger.info("stopped")
    }
}

/// Tells the log when a graceful shutdown begins (an operator sees why the broker stops taking connections).
struct ShutdownNotice: Service {
    let logger: Logger
    /// Seconds the requests in flight get before they are cancelled.
    let bound: Int64

    func run() async throws {
        // Cancelled instead (the group failed): nothing to announce.
        guard (try? await gracefulShutdown()) != nil else { return }
        logger.info("shutting down: no new connections; requests in flight finish within \(bound) s")
    }
}

/// Background upkeep: picks up rotated keys, retires expired ones, purges dead refresh tokens.
struct MaintenanceService: Service {
    let service: BrokerService

    func run() async throws {
        await cancelWhenGracefulShutdown {
            var ticks = 0
            while !Task.isCancelled {
                // Once a second: a key rotated on the shared store is served by every broker within two.
                try? await Task.sleep(for: .seconds(1))
                if Task.isCancelled { break }
                await service.maintain()
                ticks += 1
                if ticks % 3600 == 1 { await service.purgeExpired() }
            }
        }
    }
}

/// Sends queued back-channel logouts: every second (a session ended by another broker, or by `broker sessions
/// revoke` on the shared store, is told to its apps within about a second), and at once when this broker ends one.
struct BackchannelLogoutService: Service {
    let sender: BackchannelLogout

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                await sender.deliverDue()
                await sender.waitForWork(upTo: .seconds(1))
            }
        }
    }
}

/// Makes a request's DPoP proofs known to whatever checks an access token while it is handled
/// (``DPoPRequest/current``): every endpoint that takes a user's access token takes a bound one with its proof.
/// Requests without a `DPoP` header pass untouched.
struct DPoPContextMiddleware: RouterMiddleware {
    typealias Context = BrokerRequestContext

    /// Every `DPoP` field is kept (RFC 9449 §4.1: exactly one is allowed; the checker says so). Made once: this
    /// runs for every request.
    static let field: HTTPField.Name = {
        guard let name = HTTPField.Name(DPoPChecker.header) else { preconditionFailure("DPoP is a valid field name") }
        return name
    }()

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        let proofs = request.headers[values: Self.field]
        guard !proofs.isEmpty else { return try await next(request, context) }
        return try await DPoPRequest.$current.withValue(
            DPoPRequest(proofs: proofs, method: request.method.rawValue, path: request.uri.path)
        ) { try await next(request, context) }
    }
}

/// Where `GET /metrics` is served (``port``: its own port; `nil`: the main one) and the bearer token it asks for.
package struct MetricsEndpoint: Sendable {
    package var port: Int?
    /// Where that port listens (`server.metrics_host`, loopback by default).
    package var host: String
    package var token: Secret?

    package init(port: Int? = nil, host: String = "127.0.0.1", token: Secret? = nil) {
        self.port = port
        self.host = host
        self.token = token
    }
}

extension BrokerHTTPServer {
    /// The Prometheus text exposition; with a token configured, only for `Authorization: Bearer <token>`
    /// (compared in constant time).
    static func metricsResponse(_ request: Request, service: BrokerService, token: Secret?) -> Response {
        if let token {
            let presented = request.headers[.authorization].flatMap { header -> String? in
                header.utf8.starts(with: "Bearer ".utf8) ? String(header.dropFirst(7)) : nil
            }
            guard let presented, ConstantTime.equals(presented, token.exposed) else {
                var response = response(APIError.invalidToken("the metrics token is required"))
                response.headers[.wwwAuthenticate] = "Bearer realm=\"metrics\""
                return response
            }
        }
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
        headers[.cacheControl] = "no-store"
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: service.metricsExposition())))
    }
}

/// `X-Request-Id`: taken from the request when it is 1–128 characters of letters, digits and `-_.:/+=@`,
/// else made here (16 random bytes, base64url).
enum RequestID {
    static let field: HTTPField.Name = {
        guard let name = HTTPField.Name("X-Request-Id") else { preconditionFailure("X-Request-Id is a valid token") }
        return name
    }()

    static func accepting(_ value: String?) -> String? {
        guard let value, (1...128).contains(value.utf8.count) else { return nil }
        let allowed = value.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                true
            default: "-_.:/+=@".utf8.contains(byte)
            }
        }
        return allowed ? value : nil
    }

    static func make() -> String { (try? SecureRandom.token(byteCount: 16)) ?? "unavailable" }
}
