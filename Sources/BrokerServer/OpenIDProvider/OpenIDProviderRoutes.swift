import Hummingbird

/// The OpenID Provider's routes (issue "Sign in to any app"), as one collection the router adds.
struct OpenIDProviderRoutes {
    let authorization: AuthorizationService
    let appTokens: AppTokenService
    let clients: ClientService
    let passwords: PasswordService
    let registrations: RegistrationService

    func collection() -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        routes.get("/auth/authorize") { request, context in
            Server.response(
                try await authorization.authorize(
                    try Server.query(request), cookie: request.headers.value(.cookie), address: context.clientAddress))
        }
        routes.post("/auth/authorize") { request, context in
            let input = try await Server.input(request, allowForm: true)
            return Server.response(
                try await authorization.authorize(
                    input.textFields, cookie: request.headers.value(.cookie), address: context.clientAddress))
        }
        routes.post("/auth/authorize/password") { request, context in
            Server.response(
                try await authorization.password(
                    try await Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    address: context.clientAddress))
        }
        routes.post("/auth/authorize/mfa") { request, context in
            Server.response(
                try await authorization.secondFactor(
                    try await Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    address: context.clientAddress))
        }
        routes.get("/auth/authorize/register") { request, _ in
            Server.response(try await authorization.registerPage(query: try Server.query(request)))
        }
        routes.post("/auth/authorize/register") { request, context in
            Server.response(
                try await authorization.register(
                    try await Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    address: context.clientAddress))
        }
        routes.get("/auth/password/forgot") { _, _ in
            Server.response(try passwords.forgotPage(secure: passwords.secure))
        }
        routes.post("/auth/authorize/provider") { request, context in
            Server.response(
                try await authorization.provider(
                    try await Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    address: context.clientAddress))
        }
        routes.post("/auth/authorize/consent") { request, _ in
            Server.response(
                try await authorization.consent(
                    try await Server.input(request, allowForm: true), cookie: request.headers.value(.cookie)))
        }
        routes.get("/auth/end-session") { request, _ in
            Server.response(
                try await authorization.endSession(
                    try Server.query(request), cookie: request.headers.value(.cookie)))
        }
        routes.post("/auth/end-session") { request, _ in
            let input = try await Server.input(request, allowForm: true)
            return Server.response(
                try await authorization.endSession(input.textFields, cookie: request.headers.value(.cookie)))
        }
        routes.post("/auth/end-session/confirm") { request, _ in
            Server.response(
                try await authorization.confirmEndSession(
                    try await Server.input(request, allowForm: true), cookie: request.headers.value(.cookie)))
        }
        routes.post("/auth/par") { request, context in
            let input = try await Server.input(request, allowForm: true)
            let app = try await appTokens.authenticate(
                input, authorization: request.headers.authorization())
            return Server.response(
                try await authorization.push(input.textFields, app: app, address: context.clientAddress))
        }
        routes.post("/auth/introspect") { request, _ in
            Server.response(
                try await appTokens.introspect(
                    try await Server.input(request, allowForm: true),
                    authorization: request.headers.authorization(),
                    clients: clients))
        }
        routes.post("/auth/clients") { request, context in
            Server.response(
                try await registrations.register(
                    try await Server.input(request, allowForm: false), authorization: request.headers.authorization(),
                    address: context.clientAddress))
        }
        routes.get("/auth/userinfo") { request, _ in
            Server.response(
                try await appTokens.userinfo(
                    authorization: request.headers.authorization(), formToken: nil))
        }
        routes.post("/auth/userinfo") { request, _ in
            let form =
                request.headers.value(.contentLength).map { $0 != "0" } ?? false
                ? try await Server.input(request, allowForm: true) : nil
            return Server.response(
                try await appTokens.userinfo(
                    authorization: request.headers.authorization(),
                    formToken: try form?.optionalString("access_token")))
        }
        return routes
    }
}
