package import BrokerCore
import HTTPTypes
package import Hummingbird
package import Logging
import NIOCore
import Synchronization

/// One provider's emulator, as its folder under `Providers/<Name>/Emulator/` declares it: the path it lives
/// under on the shared server and how it puts its routes there. `broker emulate` serves every emulator of the
/// build's catalog (`BrokerEmulators.all`), each under its own path, on one port.
package struct ProviderEmulator: Sendable {
    /// The first path segment of every route (`google` → `/google/…`); also the provider id's emulated host.
    package let path: String
    /// What `broker emulate --help` tells of it: the paths and the test users.
    package let summary: String
    package let mount: @Sendable (EmulatorRoutes) throws -> Void

    package init(path: String, summary: String, mount: @escaping @Sendable (EmulatorRoutes) throws -> Void) {
        self.path = path
        self.summary = summary
        self.mount = mount
    }
}

/// What an emulator mounts its routes with: the shared router (each path under the emulator's own), the
/// server's base URL once it is known, and the options every emulator takes.
package struct EmulatorRoutes {
    package typealias Handler = @Sendable (Request, BasicRequestContext) async throws -> OpenIDEmulator.Reply

    let router: Router<BasicRequestContext>
    /// The server's own base URL (`http://127.0.0.1:8788`), known once it has bound its port: handlers read it
    /// at each request.
    package let base: BaseURL
    /// Approve every sign-in at once as this test user (`--approve-as`).
    package let approveAs: String?
    package let clock: any WallClock

    /// `GET path`, answered by `handler`. Routes take Hummingbird's patterns (`:tenant`).
    package func get(_ path: String, _ handler: @escaping Handler) {
        router.get(RouterPath(path)) { request, context in EmulatorServer.respond(try await handler(request, context)) }
    }

    /// `POST path`, answered by `handler`.
    package func post(_ path: String, _ handler: @escaping Handler) {
        router.post(RouterPath(path)) { request, context in EmulatorServer.respond(try await handler(request, context))
        }
    }

    /// The query's fields (the last of a repeated name wins).
    package static func query(_ request: Request) -> [String: String] {
        var fields: [String: String] = [:]
        for (name, value) in FormEncoding.decode(request.uri.query ?? "") ?? [] { fields[name] = value }
        return fields
    }

    /// A form body's pairs, in order (at most 64 KiB read).
    package static func formPairs(_ request: Request) async throws -> [(String, String)] {
        let buffer = try await request.body.collect(upTo: 64 * 1024)
        return FormEncoding.decode(String(decoding: buffer.readableBytesView, as: UTF8.self)) ?? []
    }

    /// A form body's fields (the last of a repeated name wins).
    package static func form(_ request: Request) async throws -> [String: String] {
        var fields: [String: String] = [:]
        for (name, value) in try await formPairs(request) { fields[name] = value }
        return fields
    }
}

/// `broker emulate`: the provider emulators on one loopback port, each under its own path.
package enum EmulatorServer {
    package static func run(
        emulators: [ProviderEmulator],
        host: String,
        port: Int,
        approveAs: String? = nil,
        logger: Logger,
        clock: any WallClock,
        onReady: @escaping @Sendable (String, Int) -> Void
    ) async throws {
        let base = BaseURL()
        let router = Router()
        let routes = EmulatorRoutes(router: router, base: base, approveAs: approveAs, clock: clock)
        for emulator in emulators { try emulator.mount(routes) }
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
package final class BaseURL: Sendable {
    private let storage = Mutex<String>("")
    package var value: String { storage.withLock { $0 } }
    func set(_ text: String) { storage.withLock { $0 = text } }

    /// The URL the client used: OAuth 1.0a signatures are computed over it.
    package func fullURL(_ request: Request) -> String { value + request.uri.description }
}
