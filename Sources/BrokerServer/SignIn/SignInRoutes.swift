import BrokerCore
import Hummingbird

/// The providers on offer and the browser sign-in through one of them (start, and the provider's callback).
enum SignInRoutes {
    static func collection(_ service: BrokerService) -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        routes.get("/auth/providers") { _, _ in Server.response(service.providers()) }
        routes.get("/auth/:provider/start") { request, context in
            try await Server.response(
                service.signIn.startBrowserSignIn(
                    provider: context.parameters.get("provider") ?? "", query: try Server.query(request),
                    address: context.clientAddress))
        }
        routes.get("/auth/:provider/callback") { request, context in
            try await Server.response(
                service.signIn.completeBrowserSignIn(
                    provider: context.parameters.get("provider") ?? "", query: try Server.query(request),
                    cookie: request.headers.value(.cookie), address: context.clientAddress))
        }
        return routes
    }
}
