import BrokerConfiguration
package import BrokerCore
package import BrokerCrypto
import BrokerHTTP
import BrokerProviderSchemas
import BrokerProviders
package import BrokerServer
package import BrokerStore
package import BrokerTesting
package import Foundation
package import HTTPTypes
import Hummingbird
import HummingbirdTesting
package import Logging
import NIOCore
import Testing

/// The broker's application built in the test process: the real router, services and SQLite store, on a
/// manual clock and a scripted outbound transport, driven through Hummingbird's in-memory test client.
///
/// For endpoint logic — errors, grants, rotation, revocation, throttling, the browser-flow state machine.
/// What only a process shows (signals, files, the CLI, interop) stays with ``BrokerProcess``.
package struct InProcessBroker {
    /// The id-token key every in-process broker's store starts with (made once per test process).
    package static let sharedIDTokenKey = Result { try AsymmetricKey.generate(.rsa(bits: 2048)) }

    package let clock: ManualClock
    package let transport: ScriptedTransport
    package let service: BrokerService
    package let store: any Store
    package let directory: URL

    /// - Parameter config: a configuration file's JSON (providers, server keys); the data directory is the
    ///   test's own.
    /// - Parameters:
    ///   - issuer: the issuer unless the configuration names one; `nil` for none (made from host and port).
    ///   - shared: a PostgreSQL store and the master key its brokers share (each in-process broker on it is
    ///     one of several brokers behind a load balancer); `nil`: a SQLite store of this broker's own.
    package init(
        config: String? = nil, clock: ManualClock = ManualClock(), transport: ScriptedTransport = ScriptedTransport(),
        shared: (store: any Store, master: [UInt8])? = nil, issuer: String? = "http://broker.test"
    ) async throws {
        self.clock = clock
        self.transport = transport
        directory = try TemporaryDirectory.make(prefix: "broker-inprocess")
        var path: String?
        if let config {
            let file = directory.appendingPathComponent("broker.json")
            try Data(config.utf8).write(to: file)
            path = file.path
        }
        var configuration = try ServerConfiguration.load(
            catalog: BrokerProviderSchemas.all, path: path, environment: [:])
        configuration.dataDirectory = directory.appendingPathComponent("data").path
        // nil: none configured, the issuer follows the bound port (`serverStarted`) as with `--port 0`.
        configuration.issuer = configuration.issuer ?? issuer
        try FileManager.default.createDirectory(
            atPath: configuration.dataDirectory, withIntermediateDirectories: true)
        let store: any Store = try shared?.store ?? SQLiteStore(path: configuration.dataDirectory + "/broker.sqlite3")
        self.store = store
        let master: MasterKey
        if let shared {
            master = MasterKey(bytes: shared.master, origin: "test master key")
        } else {
            master = try await MasterKey.load(configuration: configuration, environment: [:], store: store)
        }
        service = try await BrokerService.open(
            configuration: configuration,
            providers: BrokerProviders.all,
            store: store,
            master: master,
            logger: Logger.test(),
            // Cheap scrypt: these tests are about the endpoints, not the hash's cost.
            hasher: PasswordHasher(parameters: .init(logN: 10, r: 8, p: 1)),
            clock: clock,
            http: { [transport] in transport },
            // Mail retries at once: a test never waits out a back-off.
            // With `server.audit_store`, the events go to the store (where a test reads them), as `broker serve`
            // sends them; otherwise nowhere.
            audit: configuration.auditStore ? try AuditTrail(destination: .discard, clock: clock, store: store) : nil,
            mailBackoff: { _ in .zero },
            // One RSA key for every in-process broker: making a 2048-bit key per test costs seconds of CPU in all.
            newIDTokenKey: { try InProcessBroker.sharedIDTokenKey.get() }
        )
    }

    /// Runs `body` against the application through the in-memory test client.
    package func test(
        metrics: MetricsEndpoint = MetricsEndpoint(), _ body: @escaping @Sendable (Client) async throws -> Void
    ) async throws {
        let app = Application(
            router: BrokerHTTPServer.router(service: service, logger: Logger.test(), metrics: metrics))
        try await app.test(.router) { client in try await body(Client(client: client)) }
    }

    /// Runs `body` with the application listening on a real port on this machine, for other processes (the
    /// CLI, a resource server) to reach at the URL it is given; the in-memory-style client comes along.
    ///
    /// It is `broker serve`'s own HTTP server (``BrokerHTTPServer/mainServer(service:limits:cap:logger:)``: the
    /// connection guard and the constant documents answered beneath the router), logging to `logger`.
    package func live(
        logger: Logger = Logger.test(), _ body: @escaping @Sendable (Client, String) async throws -> Void
    ) async throws {
        // A day's request deadline: the test client keeps one connection and does not open another when the
        // server closes an idle one, and a test that runs git or the CLI in between can leave it idle for minutes
        // on a busy machine. The deadline itself is tested on the embedded loop's clock (ConstantDocumentTests)
        // and against broker processes (SlowClientTests).
        let limits = ConnectionLimits(maxConnections: 256, requestTimeout: 86_400)
        let app = Application(
            router: BrokerHTTPServer.router(service: service, logger: logger, metrics: MetricsEndpoint()),
            server: BrokerHTTPServer.mainServer(service: service, limits: limits, cap: 256, logger: logger),
            configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: Logger.test("Hummingbird"))
        try await app.test(.live) { client in
            let port = try #require(client.port)
            // A broker made with `issuer: nil` is reached at, and names itself by, this address (DPoP proofs
            // name the URL the client used: it must be the issuer's).
            service.serverStarted(host: "127.0.0.1", port: port)
            try await body(Client(client: client), "http://127.0.0.1:\(port)")
        }
    }

    /// A thin client over the test client, answering the contract's JSON.
    package struct Client: Sendable {
        let client: any TestClientProtocol

        package struct Reply: Sendable {
            package let status: Int
            package let json: JSONValue?
            package let headers: HTTPFields
            package let body: [UInt8]

            package subscript(key: String) -> JSONValue? { json?[key] }
            package var error: String? { json?["error"]?.stringValue }
            package func header(_ name: String) -> String? { HTTPField.Name(name).flatMap { headers[$0] } }
        }

        package func send(_ method: HTTPRequest.Method, _ uri: String, headers: HTTPFields = [:], body: [UInt8]? = nil)
            async throws -> Reply
        {
            try await client.execute(
                uri: uri, method: method, headers: headers, body: body.map { ByteBuffer(bytes: $0) }
            ) { response in
                Reply(
                    status: Int(response.status.code),
                    json: JSONValue.parse(Array(response.body.readableBytesView)),
                    headers: response.headers, body: Array(response.body.readableBytesView))
            }
        }

        package func get(_ uri: String, bearer: String? = nil) async throws -> Reply {
            var headers = HTTPFields()
            if let bearer { headers[.authorization] = "Bearer \(bearer)" }
            return try await send(.get, uri, headers: headers)
        }

        package func post(_ uri: String, json: JSONValue) async throws -> Reply {
            try await send(.post, uri, headers: [.contentType: "application/json"], body: Array(json.serialized().utf8))
        }

        package func form(_ uri: String, _ fields: [(String, String)]) async throws -> Reply {
            try await send(
                .post, uri, headers: [.contentType: "application/x-www-form-urlencoded"],
                body: Array(FormEncoding.encode(fields).utf8))
        }

        package func register(_ email: String, _ password: String) async throws -> Reply {
            try await post("/auth/register", json: ["email": .string(email), "password": .string(password)])
        }

        package func login(_ email: String, _ password: String) async throws -> Reply {
            try await post("/auth/login", json: ["email": .string(email), "password": .string(password)])
        }

        package func refresh(_ token: String) async throws -> Reply {
            try await form("/auth/token", [("grant_type", "refresh_token"), ("refresh_token", token)])
        }

        /// An account token for the session of the session response `signedIn` (register, login, a grant): what
        /// the account endpoints accept (RT2-1), got as the CLI gets it, by the refresh grant with
        /// `scope=account`.
        package func accountToken(_ signedIn: Reply) async throws -> String {
            try await accountToken(refreshToken: try #require(signedIn["refresh_token"]?.stringValue))
        }

        /// The same from a refresh token (spent: the grant rotates it).
        package func accountToken(refreshToken: String) async throws -> String {
            let reply = try await accountGrant(refreshToken: refreshToken)
            #expect(reply.status == 200 && reply["scope"]?.stringValue == "account", "\(reply.status)")
            return try #require(reply["access_token"]?.stringValue)
        }

        /// The refresh grant with `scope=account`, its whole answer (the account token and the rotated refresh
        /// token, or the refusal).
        package func accountGrant(refreshToken: String) async throws -> Reply {
            try await form(
                "/auth/token",
                [("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("scope", "account")])
        }
    }
}
