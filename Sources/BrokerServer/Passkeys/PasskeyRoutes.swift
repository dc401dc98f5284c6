import BrokerCore
import Hummingbird

/// The passkey routes (issue "Passkeys"), as one collection the router adds.
struct PasskeyRoutes {
    let passkeys: PasskeyService
    let authorization: AuthorizationService
    let devices: DeviceService

    func collection() -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        // The pages' one script: public, cacheable for a day, never sniffed as anything else.
        routes.get("/auth/passkey.js") { _, _ in
            var script = APIResponse(
                status: 200, body: .null,
                headers: [
                    ("Content-Type", "text/javascript; charset=utf-8"), ("Cache-Control", "public, max-age=86400"),
                    ("X-Content-Type-Options", "nosniff"),
                ])
            script.html = PasskeyScript.source
            return Server.response(script)
        }
        routes.post("/auth/passkey/options") { _, _ in Server.response(try passkeys.signInOptions()) }
        routes.post("/auth/passkey/ticket") { request, _ in
            Server.response(try await passkeys.ticket(authorization: request.headers.authorization()))
        }
        routes.get("/auth/passkey/add") { request, _ in
            Server.response(try await passkeys.addPage(query: try Server.query(request)))
        }
        routes.get("/auth/passkey/recover") { request, _ in
            Server.response(try await passkeys.recoverPage(query: try Server.query(request)))
        }
        routes.post("/auth/passkey/add") { request, _ in
            Server.response(
                try await passkeys.add(
                    try await Server.input(request, allowForm: true), cookie: request.headers.value(.cookie)))
        }
        routes.get("/auth/passkey/start") { request, _ in
            Server.response(try await passkeys.loopbackPage(query: try Server.query(request)))
        }
        routes.post("/auth/passkey/finish") { request, _ in
            Server.response(
                try await passkeys.loopbackFinish(
                    try await Server.input(request, allowForm: true), cookie: request.headers.value(.cookie)))
        }
        routes.get("/auth/passkeys") { request, _ in
            Server.response(try await passkeys.list(authorization: request.headers.authorization()))
        }
        routes.post("/auth/passkeys/remove") { request, _ in
            Server.response(
                try await passkeys.remove(
                    try await Server.input(request, allowForm: false),
                    authorization: request.headers.authorization()))
        }
        routes.post("/auth/authorize/passkey") { request, _ in
            Server.response(
                try await authorization.passkey(
                    try await Server.input(request, allowForm: true), cookie: request.headers.value(.cookie)))
        }
        routes.post("/auth/authorize/mfa-passkey") { request, _ in
            Server.response(
                try await authorization.secondFactorPasskey(
                    try await Server.input(request, allowForm: true), cookie: request.headers.value(.cookie)))
        }
        routes.post("/auth/device/mfa-passkey") { request, context in
            Server.response(
                try await devices.secondFactorPasskey(
                    try await Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    address: context.clientAddress))
        }
        routes.post("/auth/device/passkey") { request, context in
            Server.response(
                try await devices.passkeySignIn(
                    try await Server.input(request, allowForm: true), cookie: request.headers.value(.cookie),
                    address: context.clientAddress))
        }
        return routes
    }
}
