import BrokerCore
import Hummingbird

/// The token endpoint (every grant), revocation, and who an access token belongs to.
enum TokenRoutes {
    static func collection(_ service: BrokerService) -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        routes.post("/auth/token") { request, _ in
            let body = try await Server.input(request, allowForm: true)
            let authorization = try request.headers.authorization()
            return try await Server.response(
                service.bound(input: body, authorization: authorization) {
                    try await service.token(body, authorization: authorization)
                })
        }
        routes.post("/auth/revoke") { request, _ in
            try await Server.response(service.grants.revoke(Server.input(request, allowForm: true)))
        }
        routes.get("/auth/me") { request, _ in
            try await Server.response(service.grants.me(authorization: request.headers.authorization()))
        }
        return routes
    }
}
