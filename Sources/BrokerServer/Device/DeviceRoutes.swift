import BrokerCore
import Hummingbird

/// The device authorization grant (RFC 8628): the code, the page a person opens, its sign-in and decision.
struct DeviceRoutes {
    let devices: DeviceService

    func collection() -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        routes.post("/auth/device") { request, context in
            try await Server.response(
                devices.authorize(
                    Server.input(request, allowForm: true), address: context.clientAddress,
                    authorization: request.headers.authorization()))
        }
        routes.get("/device") { request, context in
            try await Server.response(
                devices.page(query: try Server.query(request), address: context.clientAddress))
        }
        routes.post("/auth/device/signin") { request, context in
            try await Server.response(
                devices.startSignIn(
                    Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    address: context.clientAddress))
        }
        routes.post("/auth/device/password") { request, context in
            try await Server.response(
                devices.passwordSignIn(
                    Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    address: context.clientAddress))
        }
        routes.post("/auth/device/mfa") { request, context in
            try await Server.response(
                devices.secondFactorSignIn(
                    Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    address: context.clientAddress))
        }
        routes.post("/auth/device/decision") { request, _ in
            try await Server.response(
                devices.decide(Server.input(request, allowForm: true), cookie: request.headers.value(.cookie)))
        }
        return routes
    }
}
