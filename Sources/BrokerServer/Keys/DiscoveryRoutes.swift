import BrokerCore
import Hummingbird

/// What a relying party reads first: the OpenID discovery document, the same metadata where OAuth clients look
/// for it (RFC 8414's `/.well-known/oauth-authorization-server`, which MCP clients read first), and the signing
/// keys (JWKS).
struct DiscoveryRoutes {
    let discovery: DiscoveryService

    func collection() -> RouteCollection<BrokerRequestContext> {
        let routes = RouteCollection(context: BrokerRequestContext.self)
        for document in documents {
            routes.get(RouterPath(document.path)) { _, _ in BrokerHTTPServer.response(document.answer()) }
        }
        return routes
    }

    /// The documents, for the router and for ``ConstantDocumentHandler``, which answers them beneath it.
    var documents: [ConstantDocuments.Document] {
        [
            .init(path: "/.well-known/openid-configuration") { [discovery] in discovery.discovery() },
            .init(path: "/.well-known/oauth-authorization-server") { [discovery] in discovery.discovery() },
            .init(path: "/.well-known/jwks.json") { [discovery] in discovery.jwks() },
        ]
    }
}
