import BrokerCore
import Hummingbird

/// A second factor: its status, enrolment, removal and recovery codes (JSON, for `broker mfa`).
struct SecondFactorRoutes {
    let account: SecondFactorAccount

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
        return routes
    }
}
