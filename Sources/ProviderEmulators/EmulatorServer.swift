package import BrokerCore
import HTTPTypes
import Hummingbird
package import Logging
import NIOCore
import Synchronization

/// `broker emulate`: the provider emulators on one loopback port, each under its provider id.
package enum EmulatorServer {
    package static func run(
        host: String,
        port: Int,
        approveAs: String? = nil,
        logger: Logger,
        clock: any WallClock,
        onReady: @escaping @Sendable (String, Int) -> Void
    ) async throws {
        let google = try OpenIDEmulator(OpenIDEmulator.google, approveAs: approveAs, clock: clock)
        let microsoft = try OpenIDEmulator(OpenIDEmulator.microsoft, approveAs: approveAs, clock: clock)
        let base = BaseURL()
        let router = Router()
        router.get("/google/.well-known/openid-configuration") { _, _ in
            respond(.json(status: 200, google.discovery(base: base.value + "/google", issuer: base.value + "/google")))
        }
        router.get("/google/jwks") { _, _ in respond(.json(status: 200, try google.jwks())) }
        router.get("/google/authorize") { request, _ in respond(google.authorize(query(request))) }
        router.post("/google/authorize") { request, _ in
            respond(try google.consent(try await form(request)))
        }
        router.post("/google/token") { request, _ in
            respond(
                try google.token(
                    try await form(request), authorization: request.headers[.authorization],
                    issuer: { _ in base.value + "/google" }))
        }
        router.get("/google/userinfo") { request, _ in
            respond(google.userinfo(authorization: request.headers[.authorization]))
        }

        // Microsoft identity platform v2: /microsoft/{tenant}/…
        let microsoftBase: @Sendable (String) -> String = { tenant in base.value + "/microsoft/" + tenant }
        router.get("/microsoft/:tenant/v2.0/.well-known/openid-configuration") { _, context in
            let tenant = context.parameters.get("tenant") ?? ""
            return respond(
                .json(
                    status: 200,
                    microsoft.discovery(
                        base: microsoftBase(tenant),
                        issuer: OpenIDEmulator.microsoftIssuer(base: base.value + "/microsoft", tenant: tenant))))
        }
        router.get("/microsoft/:tenant/discovery/v2.0/keys") { _, _ in respond(.json(status: 200, try microsoft.jwks()))
        }
        router.get("/microsoft/:tenant/oauth2/v2.0/authorize") { request, context in
            respond(microsoft.authorize(query(request), tenant: context.parameters.get("tenant")))
        }
        router.post("/microsoft/:tenant/oauth2/v2.0/authorize") { request, context in
            respond(try microsoft.consent(try await form(request), tenant: context.parameters.get("tenant")))
        }
        router.post("/microsoft/:tenant/oauth2/v2.0/token") { request, _ in
            respond(
                try microsoft.token(
                    try await form(request), authorization: request.headers[.authorization],
                    issuer: { account in "\(base.value)/microsoft/\(account.tenantID ?? "")/v2.0" }))
        }
        // Facebook Login: the dialog on www.facebook.com, the Graph API on graph.facebook.com.
        let facebook = OAuth2Emulator(.facebook, approveAs: approveAs, clock: clock)
        router.get("/facebook/v19.0/dialog/oauth") { request, _ in respond(facebook.authorize(query(request))) }
        router.post("/facebook/v19.0/dialog/oauth") { request, _ in
            respond(try facebook.consent(try await form(request)))
        }
        router.get("/facebook/v19.0/oauth/access_token") { request, _ in
            respond(try facebook.token(query(request), authorization: nil))
        }
        router.post("/facebook/v19.0/oauth/access_token") { request, _ in
            respond(try facebook.token(try await form(request), authorization: nil))
        }
        router.get("/facebook/v19.0/me") { request, _ in
            respond(facebook.me(query(request), authorization: request.headers[.authorization]))
        }

        // X (Twitter) OAuth 2.0.
        let twitter = OAuth2Emulator(.twitter, approveAs: approveAs, clock: clock)
        router.get("/twitter/i/oauth2/authorize") { request, _ in respond(twitter.authorize(query(request))) }
        router.post("/twitter/i/oauth2/authorize") { request, _ in respond(try twitter.consent(try await form(request)))
        }
        router.post("/twitter/2/oauth2/token") { request, _ in
            respond(try twitter.token(try await form(request), authorization: request.headers[.authorization]))
        }
        router.get("/twitter/2/users/me") { request, _ in
            respond(twitter.me(query(request), authorization: request.headers[.authorization]))
        }

        // X (Twitter) OAuth 1.0a: signatures are checked over the URL the client used.
        let oauth1 = OAuth1Emulator(approveAs: approveAs, clock: clock)
        let fullURL: @Sendable (Request) -> String = { request in base.value + request.uri.description }
        router.post("/twitter/oauth/request_token") { request, _ in
            respond(
                try oauth1.requestToken(
                    url: fullURL(request), authorization: request.headers[.authorization],
                    body: try await formPairs(request)))
        }
        router.get("/twitter/oauth/authorize") { request, _ in respond(oauth1.authorize(query(request))) }
        router.post("/twitter/oauth/authorize") { request, _ in respond(try oauth1.consent(try await form(request))) }
        router.post("/twitter/oauth/access_token") { request, _ in
            respond(
                try oauth1.accessToken(
                    url: fullURL(request), authorization: request.headers[.authorization],
                    body: try await formPairs(request)))
        }
        router.get("/twitter/1.1/account/verify_credentials.json") { request, _ in
            respond(oauth1.verifyCredentials(url: fullURL(request), authorization: request.headers[.authorization]))
        }

        let app = Application(
            router: router,
            configuration: ApplicationConfiguration(address: .hostname(host, port: port), serverName: nil),
            onServerRunning: { channel in
                let bound = channel.localAddress?.port ?? port
                let shown = host.contains(":") ? "[\(host)]" : host
                base.set("http://\(shown):\(bound)")
                onReady(host, bound)
            },
            logger: logger
        )
        try await app.runService()
    }

    static func query(_ request: Request) -> [String: String] {
        var fields: [String: String] = [:]
        for (name, value) in FormEncoding.decode(request.uri.query ?? "") ?? [] { fields[name] = value }
        return fields
    }

    static func formPairs(_ request: Request) async throws -> [(String, String)] {
        let buffer = try await request.body.collect(upTo: 64 * 1024)
        return FormEncoding.decode(String(decoding: buffer.readableBytesView, as: UTF8.self)) ?? []
    }

    static func form(_ request: Request) async throws -> [String: String] {
        let buffer = try await request.body.collect(upTo: 64 * 1024)
        var fields: [String: String] = [:]
        let text = String(decoding: buffer.readableBytesView, as: UTF8.self)
        for (name, value) in FormEncoding.decode(text) ?? [] { fields[name] = value }
        return fields
    }

    static func respond(_ reply: OpenIDEmulator.Reply) -> Response {
        var headers = HTTPFields()
        headers[.cacheControl] = "no-store"
        switch reply {
        case .redirect(let location):
            headers[.location] = location
            return Response(status: .found, headers: headers)
        case .page(let status, let html):
            headers[.contentType] = "text/html; charset=utf-8"
            return Response(
                status: HTTPResponse.Status(code: status), headers: headers,
                body: ResponseBody(byteBuffer: ByteBuffer(string: html)))
        case .text(let text):
            headers[.contentType] = "application/x-www-form-urlencoded"
            return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
        case .json(let status, let value):
            headers[.contentType] = "application/json"
            return Response(
                status: HTTPResponse.Status(code: status), headers: headers,
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: value.serializedBytes)))
        }
    }
}

/// The emulator's own base URL, known once it has bound its port.
final class BaseURL: Sendable {
    private let storage = Mutex<String>("")
    var value: String { storage.withLock { $0 } }
    func set(_ text: String) { storage.withLock { $0 = text } }
}
