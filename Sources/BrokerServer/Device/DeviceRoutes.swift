import BrokerCore
import Hummingbird

/// The device authorization grant (RFC 8628): the code, the page a person opens, its sign-in and decision.
enum DeviceRoutes {
    static func collection(_ service: BrokerService) -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        routes.post("/auth/device") { request, context in
            try await Server.response(
                service.devices.authorize(
                    Server.input(request, allowForm: true), address: context.clientAddress,
                    authorization: request.headers.authorization()))
        }
        routes.get("/device") { request, context in
            try await Server.response(
                service.devices.page(query: try Server.query(request), address: context.clientAddress))
        }
        routes.post("/auth/device/signin") { request, context in
            try await Server.response(
                service.devices.startSignIn(
                    Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    address: context.clientAddress))
        }
        routes.post("/auth/device/password") { request, context in
            try await Server.response(
                service.devices.passwordSignIn(
                    Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    address: context.clientAddress))
        }
        routes.post("/auth/device/decision") { request, _ in
            try await Server.response(
                service.devices.decide(Server.input(request, allowForm: true), cookie: request.headers.value(.cookie)))
        }
        return routes
    }
}
