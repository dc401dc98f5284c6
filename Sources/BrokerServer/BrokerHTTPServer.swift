import BrokerConfiguration
package import BrokerCore
import BrokerCrypto
import BrokerStore
import HTTPTypes
package import Hummingbird
package import HummingbirdCore
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

/// The broker's HTTP surface on Hummingbird.
package enum BrokerHTTPServer {
    /// The whole route table: the middlewares, then each feature's routes (their folders hold their services).
    package static func router(
        service: BrokerService, logger: Logger, metrics: MetricsEndpoint = MetricsEndpoint()
    ) -> Router<BrokerRequestContext> {
        let router = Router(context: BrokerRequestContext.self)
        router.middlewares.add(
            ErrorAndLogMiddleware(
                logger: logger, metrics: service.metrics, trustedProxies: service.configuration.trustedProxies))
        for routes in [
            ObservabilityRoutes(
                health: HealthCheck(store: service.store, logger: service.logger), exposition: service.exposition,
                metrics: metrics
            ).collection(),
            DiscoveryRoutes(discovery: service.discovery).collection(),
            AccountRoutes(
                accounts: service.accounts, passwords: service.passwords, selfService: service.selfService,
                verification: service.verification, endpoint: service.tokenEndpoint
            ).collection(),
            TokenRoutes(endpoint: service.tokenEndpoint, grants: service.grants).collection(),
            OpenIDProviderRoutes(
                authorization: service.authorization, appTokens: service.appTokens, clients: service.clients,
                passwords: service.passwords, registrations: service.registrations
            ).collection(),
            PasskeyRoutes(passkeys: service.passkeys, authorization: service.authorization, devices: service.devices)
                .collection(),
            SignInRoutes(signIn: service.signIn, callback: service.signInCallback, passkeys: service.passkeys)
                .collection(),
            DeviceRoutes(devices: service.devices).collection(),
            LinkRoutes(links: service.links).collection(),
            SecondFactorRoutes(account: service.secondFactorAccount, recovery: service.secondFactorRecovery)
                .collection(),
            AccountPageRoutes(page: service.accountPage).collection(),
        ] {
            router.addRoutes(routes)
        }
        return router
    }

    /// The main port's HTTP/1.1 server. Each connection's pipeline (``BrokerHTTP1Channel``): HTTP decoding, its
    /// place under the cap and its request deadline (``ConnectionGuardHandler``), the constant documents answered
    /// on the event loop (``ConstantDocumentHandler``), then the conversion to HTTP types and the router.
    ///
    /// - Parameter cap: the connections served at once (``ConnectionLimits/effectiveMaxConnections(descriptorLimit:)``).
    package static func mainServer(service: BrokerService, limits: ConnectionLimits, cap: Int, logger: Logger)
        -> HTTPServerBuilder
    {
        let counter = ConnectionCounter(limit: cap, perNetwork: limits.perAddress)
        let documents = ConstantDocuments(
            documents: DiscoveryRoutes(discovery: service.discovery).documents, logger: logger, metrics: service.metrics
        )
        return HTTPServerBuilder { responder in
            BrokerHTTP1Channel(responder: responder) {
                connectionHandlers(counter: counter, limits: limits, documents: documents, logger: logger)
            }
        }
    }

    /// A new connection's own handlers, in order: the guard first, so that it sees every request and answer.
    package static func connectionHandlers(
        counter: ConnectionCounter, limits: ConnectionLimits, documents: ConstantDocuments, logger: Logger
    ) -> [any RemovableChannelHandler] {
        let connectionGuard = ConnectionGuardHandler(counter: counter, limits: limits, logger: logger)
        return [connectionGuard, ConstantDocumentHandler(documents: documents, connectionGuard: connectionGuard)]
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
        let server = mainServer(service: service, limits: limits, cap: cap, logger: logger)
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
                metricsResponse(request, exposition: service.exposition, token: metrics.token)
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
                        server: HTTPServerBuilder { responder in
                            BrokerHTTP1Channel(responder: responder) {
                                [ConnectionGuardHandler(counter: metricsCounter, limits: metricsLimits, logger: logger)]
                            }
                        },
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
