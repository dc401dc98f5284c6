import BrokerCore
import Hummingbird

/// Health, and the Prometheus metrics when they are served on the main port (`metrics.port` unset).
enum ObservabilityRoutes {
    static func collection(_ service: BrokerService, metrics: MetricsEndpoint) -> RouteCollection<BrokerRequestContext>
    {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        if metrics.port == nil {
            routes.get("/metrics") { request, _ in
                Server.metricsResponse(request, service: service, token: metrics.token)
            }
        }
        routes.get("/healthz") { _, _ in Server.response(await service.health()) }
        return routes
    }
}
