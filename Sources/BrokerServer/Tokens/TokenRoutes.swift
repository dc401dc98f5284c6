import BrokerCore
import Hummingbird

/// The token endpoint (every grant), revocation, and who an access token belongs to.
struct TokenRoutes {
    let endpoint: TokenEndpoint
    let grants: GrantService

    func collection() -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        routes.post("/auth/token") { request, _ in
            let body = try await Server.input(request, allowForm: true)
            let authorization = try request.headers.authorization()
            return try await Server.response(
                endpoint.bound(input: body, authorization: authorization) {
                    try await endpoint.token(body, authorization: authorization)
                })
        }
        routes.post("/auth/revoke") { request, _ in
            try await Server.response(grants.revoke(Server.input(request, allowForm: true)))
        }
        routes.get("/auth/me") { request, _ in
            try await Server.response(grants.me(authorization: request.headers.authorization()))
        }
        return routes
    }
}
