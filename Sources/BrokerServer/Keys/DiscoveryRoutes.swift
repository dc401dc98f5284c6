import BrokerCore
import Hummingbird
import Logging

/// What a relying party reads first: the OpenID discovery document and the signing keys (JWKS).
enum DiscoveryRoutes {
    static func collection(_ service: BrokerService) -> RouteCollection<BrokerRequestContext> {
        let routes = RouteCollection(context: BrokerRequestContext.self)
        for document in documents(service) {
            routes.get(RouterPath(document.path)) { _, _ in BrokerHTTPServer.response(document.answer()) }
        }
        return routes
    }

    /// The two documents, for the router and for ``ConstantDocumentHandler``, which answers them beneath it.
    static func documents(_ service: BrokerService) -> [ConstantDocuments.Document] {
        [
            .init(path: "/.well-known/openid-configuration") { service.discovery() },
            .init(path: "/.well-known/jwks.json") { service.jwks() },
        ]
    }
}
