import BrokerCore
import Hummingbird

/// Health, and the Prometheus metrics when they are served on the main port (`metrics.port` unset).
struct ObservabilityRoutes {
    let health: HealthCheck
    let exposition: MetricsExposition
    let metrics: MetricsEndpoint

    func collection() -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        if metrics.port == nil {
            routes.get("/metrics") { request, _ in
                Server.metricsResponse(request, exposition: exposition, token: metrics.token)
            }
        }
        routes.get("/healthz") { _, _ in Server.response(await health.check()) }
        return routes
    }
}
