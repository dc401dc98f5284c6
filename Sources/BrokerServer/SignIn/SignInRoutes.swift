import BrokerCore
import Hummingbird

/// The providers on offer and the browser sign-in through one of them (start, and the provider's callback).
struct SignInRoutes {
    let signIn: SignInService
    let callback: SignInCallback
    let passkeys: PasskeyService

    func collection() -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        routes.get("/auth/providers") { _, _ in Server.response(signIn.providers(passkeysEnabled: passkeys.enabled)) }
        routes.get("/auth/:provider/start") { request, context in
            try await Server.response(
                signIn.startBrowserSignIn(
                    provider: context.parameters.get("provider") ?? "", query: try Server.query(request),
                    address: context.clientAddress))
        }
        routes.get("/auth/:provider/callback") { request, context in
            try await Server.response(
                callback.complete(
                    provider: context.parameters.get("provider") ?? "", query: try Server.query(request),
                    cookie: request.headers.value(.cookie), address: context.clientAddress))
        }
        // response_mode=form_post (Sign in with Apple): relayed into the GET above (SignInService.relay).
        routes.post("/auth/:provider/callback") { request, context in
            let input = try await Server.input(request, allowForm: true)
            return Server.response(
                try signIn.relay(
                    provider: context.parameters.get("provider") ?? "", form: input.textFields,
                    address: context.clientAddress))
        }
        return routes
    }
}
