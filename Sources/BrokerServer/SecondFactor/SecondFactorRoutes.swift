import BrokerCore
import Hummingbird

/// A second factor: its status, enrolment, removal and recovery codes (JSON, for `broker mfa`), and recovery by
/// a mailed link (pages, and the JSON request `broker mfa recover` makes).
struct SecondFactorRoutes {
    let account: SecondFactorAccount
    let recovery: SecondFactorRecovery

    func collection() -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        routes.get("/auth/mfa") { request, _ in
            try await Server.response(account.status(authorization: request.headers.authorization()))
        }
        routes.post("/auth/mfa/totp") { request, context in
            try await Server.response(
                account.begin(
                    Server.input(request, allowForm: false), authorization: request.headers.authorization(),
                    address: context.clientAddress))
        }
        routes.post("/auth/mfa/totp/confirm") { request, context in
            try await Server.response(
                account.confirm(Server.input(request, allowForm: false), address: context.clientAddress))
        }
        routes.post("/auth/mfa/totp/remove") { request, context in
            try await Server.response(
                account.remove(
                    Server.input(request, allowForm: false), authorization: request.headers.authorization(),
                    address: context.clientAddress))
        }
        routes.post("/auth/mfa/recovery-codes") { request, context in
            try await Server.response(
                account.recoveryCodes(
                    Server.input(request, allowForm: false), authorization: request.headers.authorization(),
                    address: context.clientAddress))
        }
        routes.get("/auth/mfa/recover") { request, _ in
            try await Server.response(recovery.page(query: try Server.query(request)))
        }
        routes.post("/auth/mfa/recover") { request, context in
            try await Server.response(
                recovery.request(
                    Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    address: context.clientAddress))
        }
        routes.post("/auth/mfa/recover/confirm") { request, context in
            try await Server.response(
                recovery.confirm(
                    Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    address: context.clientAddress))
        }
        return routes
    }
}
