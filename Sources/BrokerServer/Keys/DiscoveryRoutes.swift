import BrokerCore
import Hummingbird

/// What a relying party reads first: the OpenID discovery document and the signing keys (JWKS).
struct DiscoveryRoutes {
    let discovery: DiscoveryService

    func collection() -> RouteCollection<BrokerRequestContext> {
        let routes = RouteCollection(context: BrokerRequestContext.self)
        for document in documents {
            routes.get(RouterPath(document.path)) { _, _ in BrokerHTTPServer.response(document.answer()) }
        }
        return routes
    }

    /// The two documents, for the router and for ``ConstantDocumentHandler``, which answers them beneath it.
    var documents: [ConstantDocuments.Document] {
        [
            .init(path: "/.well-known/openid-configuration") { [discovery] in discovery.discovery() },
            .init(path: "/.well-known/jwks.json") { [discovery] in discovery.jwks() },
        ]
    }
}
