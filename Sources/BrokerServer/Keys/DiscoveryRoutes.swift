import BrokerCore
import Hummingbird

/// What a relying party reads first: the OpenID discovery document and the signing keys (JWKS).
enum DiscoveryRoutes {
    static func collection(_ service: BrokerService) -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        routes.get("/.well-known/openid-configuration") { _, _ in Server.response(service.discovery()) }
        routes.get("/.well-known/jwks.json") { _, _ in Server.response(service.jwks()) }
        return routes
    }
}
