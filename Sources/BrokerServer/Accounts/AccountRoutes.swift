import BrokerCore
import Hummingbird

/// Custom accounts: registration, password sign-in, the address's confirmation, forgotten and changed
/// passwords, and an account's own export and deletion.
struct AccountRoutes {
    let accounts: AccountService
    let passwords: PasswordService
    let selfService: AccountSelfService
    let verification: VerificationService
    let endpoint: TokenEndpoint

    func collection() -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        routes.post("/auth/register") { request, context in
            let body = try await Server.input(request, allowForm: false)
            return try await Server.response(
                endpoint.bound(input: body, authorization: nil) {
                    try await accounts.register(body, address: context.clientAddress)
                })
        }
        routes.post("/auth/login") { request, context in
            let body = try await Server.input(request, allowForm: false)
            return try await Server.response(
                endpoint.bound(input: body, authorization: nil) {
                    try await accounts.login(body, address: context.clientAddress)
                })
        }
        routes.post("/auth/account/delete") { request, context in
            try await Server.response(
                selfService.delete(
                    Server.input(request, allowForm: false), authorization: request.headers.authorization(),
                    address: context.clientAddress))
        }
        routes.get("/auth/account/export") { request, _ in
            try await Server.response(selfService.export(authorization: request.headers.authorization()))
        }
        routes.get("/auth/verify") { request, _ in
            try await Server.response(
                verification.page(query: try Server.query(request), secure: verification.secure))
        }
        routes.post("/auth/verify") { request, _ in
            try await Server.response(
                verification.confirm(
                    Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    secure: verification.secure))
        }
        routes.post("/auth/verify/resend") { request, context in
            try await Server.response(
                verification.resend(Server.input(request, allowForm: true), address: context.clientAddress))
        }
        routes.post("/auth/password/forgot") { request, context in
            let form = try await Server.input(request, allowForm: true)
            // The page's form (it carries a CSRF token) gets a page; the API its JSON.
            if (try? form.optionalString("csrf")) != nil {
                return try await Server.response(
                    passwords.forgotForm(
                        form, cookie: request.headers.value(.cookie), address: context.clientAddress,
                        secure: passwords.secure))
            }
            return try await Server.response(passwords.forgot(form, address: context.clientAddress))
        }
        routes.get("/auth/password/reset") { request, _ in
            try await Server.response(
                passwords.resetPage(query: try Server.query(request), secure: passwords.secure))
        }
        routes.post("/auth/password/reset") { request, _ in
            try await Server.response(
                passwords.reset(
                    Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    secure: passwords.secure))
        }
        routes.post("/auth/password/change") { request, context in
            try await Server.response(
                passwords.change(
                    Server.input(request, allowForm: false), authorization: request.headers.authorization(),
                    address: context.clientAddress))
        }
        return routes
    }
}
