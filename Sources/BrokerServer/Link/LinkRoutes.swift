import BrokerCore
import Hummingbird

/// An account's ways in: listing, linking another provider (a fresh sign-in with it), unlinking one.
struct LinkRoutes {
    let links: LinkService

    func collection() -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        routes.get("/auth/identities") { request, _ in
            try await Server.response(links.identities(authorization: request.headers.authorization()))
        }
        routes.post("/auth/link") { request, context in
            try await Server.response(
                links.link(
                    Server.input(request, allowForm: false), authorization: request.headers.authorization(),
                    address: context.clientAddress))
        }
        routes.post("/auth/unlink") { request, _ in
            try await Server.response(
                links.unlink(
                    Server.input(request, allowForm: false), authorization: request.headers.authorization()))
        }
        return routes
    }
}
