import BrokerCore
import Hummingbird

/// Custom accounts: registration, password sign-in, the address's confirmation, forgotten and changed
/// passwords, and an account's own export and deletion.
enum AccountRoutes {
    static func collection(_ service: BrokerService) -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        routes.post("/auth/register") { request, context in
            let body = try await Server.input(request, allowForm: false)
            return try await Server.response(
                service.bound(input: body, authorization: nil) {
                    try await service.accounts.register(body, address: context.clientAddress)
                })
        }
        routes.post("/auth/login") { request, context in
            let body = try await Server.input(request, allowForm: false)
            return try await Server.response(
                service.bound(input: body, authorization: nil) {
                    try await service.accounts.login(body, address: context.clientAddress)
                })
        }
        routes.post("/auth/account/delete") { request, context in
            try await Server.response(
                service.selfService.delete(
                    Server.input(request, allowForm: false), authorization: request.headers.authorization(),
                    address: context.clientAddress))
        }
        routes.get("/auth/account/export") { request, _ in
            try await Server.response(service.selfService.export(authorization: request.headers.authorization()))
        }
        routes.get("/auth/verify") { request, _ in
            try await Server.response(
                service.verification.page(query: try Server.query(request), secure: service.issuerIsHTTPS))
        }
        routes.post("/auth/verify") { request, _ in
            try await Server.response(
                service.verification.confirm(
                    Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    secure: service.issuerIsHTTPS))
        }
        routes.post("/auth/verify/resend") { request, context in
            try await Server.response(
                service.verification.resend(Server.input(request, allowForm: true), address: context.clientAddress))
        }
        routes.post("/auth/password/forgot") { request, context in
            let form = try await Server.input(request, allowForm: true)
            // The page's form (it carries a CSRF token) gets a page; the API its JSON.
            if (try? form.optionalString("csrf")) != nil {
                return try await Server.response(
                    service.passwords.forgotForm(
                        form, cookie: request.headers.value(.cookie), address: context.clientAddress,
                        secure: service.issuerIsHTTPS))
            }
            return try await Server.response(service.passwords.forgot(form, address: context.clientAddress))
        }
        routes.get("/auth/password/reset") { request, _ in
            try await Server.response(
                service.passwords.resetPage(query: try Server.query(request), secure: service.issuerIsHTTPS))
        }
        routes.post("/auth/password/reset") { request, _ in
            try await Server.response(
                service.passwords.reset(
                    Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    secure: service.issuerIsHTTPS))
        }
        routes.post("/auth/password/change") { request, context in
            try await Server.response(
                service.passwords.change(
                    Server.input(request, allowForm: false), authorization: request.headers.authorization(),
                    address: context.clientAddress))
        }
        return routes
    }
}
