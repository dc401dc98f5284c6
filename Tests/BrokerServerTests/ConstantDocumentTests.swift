import BrokerCore
import BrokerCrypto
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import Testing

/// The signing keys and the discovery document answered on the event loop, beneath the router (issue 35,
/// goal 1): the same bytes, request id, log line and metrics as the router's way; the connection guard sees
/// those requests; anything the handler is not sure of goes to the router, in the order the client sent it.
@Suite("Constant documents beneath the router")
struct ConstantDocumentTests {
    static let document: [UInt8] = Array(#"{"keys":[]}"#.utf8) + [0x0A]

    static func documents(_ current: NIOLockedValueBox<[UInt8]> = .init(document)) -> ConstantDocuments {
        ConstantDocuments(
            documents: [
                .init(path: "/doc") {
                    APIResponse(
                        status: 200, body: .object(["keys": .array([])]),
                        headers: [("Cache-Control", "public, max-age=60")],
                        serialized: current.withLockedValue { $0 })
                }
            ],
            logger: Logger.test(), metrics: nil)
    }

    /// A connection's whole pipeline as `broker serve` builds it (``BrokerHTTP1Channel``): NIO's HTTP/1.1
    /// decoder and encoder, the broker's own handlers, the conversion to HTTP types, Hummingbird's connection
    /// state. Bytes in, bytes out; what reaches the router is read as request parts. The embedded loop's clock moves only when a test moves it.
    static func pipeline(
        limit: Int = 8, requestTimeout: Int64 = 30, document: NIOLockedValueBox<[UInt8]> = .init(document)
    ) throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try BrokerHTTP1Channel.configure(
            channel.pipeline.syncOperations,
            BrokerHTTPServer.connectionHandlers(
                counter: ConnectionCounter(limit: limit),
                limits: ConnectionLimits(maxConnections: limit, requestTimeout: requestTimeout),
                documents: documents(document), logger: Logger.test()),
            logger: Logger.test())
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return channel
    }

    static func send(_ channel: EmbeddedChannel, _ text: String) throws {
        try channel.writeInbound(ByteBuffer(string: text))
    }

    static func get(_ path: String, _ fields: String = "") -> String {
        "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\(fields)\r\n"
    }

    /// What reached the router: every request part passed on.
    static func passedOn(_ channel: EmbeddedChannel) throws -> [HTTPRequestPart] {
        var parts: [HTTPRequestPart] = []
        while let part = try channel.readInbound(as: HTTPRequestPart.self) { parts.append(part) }
        return parts
    }

    /// The bytes written to the connection.
    static func written(_ channel: EmbeddedChannel) throws -> [UInt8] {
        var bytes: [UInt8] = []
        while let data = try channel.readOutbound(as: IOData.self) {
            guard case .byteBuffer(let buffer) = data else { throw ServerTestError("a file region") }
            bytes += buffer.readableBytesView
        }
        return bytes
    }

    static func answers(_ channel: EmbeddedChannel) throws -> [RawHTTPConnection.Answer] {
        var bytes = try written(channel)
        var answers: [RawHTTPConnection.Answer] = []
        while let answer = try RawHTTPConnection.takeAnswer(from: &bytes) { answers.append(answer) }
        #expect(bytes.isEmpty, "a partial answer: \(bytes)")
        return answers
    }

    /// The router's answer to one request, written as the router writes it.
    static func routerAnswers(_ channel: EmbeddedChannel, status: HTTPResponse.Status = .ok) throws {
        try channel.writeOutbound(
            HTTPResponsePart.head(HTTPResponse(status: status, headerFields: [.contentLength: "0"])))
        try channel.writeOutbound(HTTPResponsePart.end(nil))
    }

    /// The connection is open until `seconds` from now and closed at that moment (its request deadline).
    static func expectClosed(
        _ channel: EmbeddedChannel, in seconds: Int64, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        channel.embeddedEventLoop.advanceTime(by: .seconds(seconds - 1))
        #expect(channel.isActive, "open until its deadline", sourceLocation: sourceLocation)
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive, "closed at its deadline", sourceLocation: sourceLocation)
    }

    @Test func aDocumentIsAnsweredWithoutTheRouter() throws {
        let channel = try Self.pipeline()
        try Self.send(channel, Self.get("/doc", "X-Request-Id: trace-42\r\n"))
        #expect(try Self.passedOn(channel).isEmpty)
        let answers = try Self.answers(channel)
        try #require(answers.count == 1)
        let answer = answers[0]
        #expect(answer.statusLine == "HTTP/1.1 200 OK")
        #expect(
            answer.headers.map(\.name) == ["Content-Type", "Cache-Control", "Content-Length", "X-Request-Id", "Date"])
        #expect(answer.header("Content-Type") == "application/json")
        #expect(answer.header("Cache-Control") == "public, max-age=60")
        #expect(answer.header("Content-Length") == "\(Self.document.count)")
        #expect(answer.header("X-Request-Id") == "trace-42")
        #expect(answer.header("Date").flatMap(Self.imfFixdate.date(from:)) != nil)
        #expect(answer.body == Self.document)

        // An unacceptable request id is replaced, as the router's way replaces it.
        try Self.send(channel, Self.get("/doc", "X-Request-Id: bad|id\r\n"))
        let made = try #require(try Self.answers(channel).first?.header("X-Request-Id"))
        #expect(made.utf8.count == 22 && RequestID.accepting(made) == made)
    }

    /// Read as the router's way reads it: repeated `X-Request-Id` fields are one joined value, which is not an
    /// acceptable id, so one is made; and an HTTP/1.0 request goes to the router (its connection rules differ).
    @Test func requestsAreReadAsTheRouterReadsThem() throws {
        let channel = try Self.pipeline()
        try Self.send(channel, Self.get("/doc", "X-Request-Id: first\r\nX-Request-Id: second\r\n"))
        let made = try #require(try Self.answers(channel).first?.header("X-Request-Id"))
        #expect(made.utf8.count == 22 && made != "first")
        try Self.send(channel, "GET /doc HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        #expect(try Self.passedOn(channel).count == 2)
        #expect(try Self.written(channel).isEmpty)
    }

    /// The bytes written beneath the encoder are the encoder's own for the same answer.
    @Test func theAnswerIsWhatTheEncoderWrites() throws {
        let channel = try Self.pipeline()
        let api = Self.documents().documents[0].answer()
        let date = HTTPDate.text(secondsSince1970: 1_795_000_000)
        let parts = BrokerHTTPServer.responseParts(api)
        var head = HTTPResponse(status: parts.status, headerFields: parts.headers)
        head.headerFields[.contentLength] = "\(parts.body.readableBytes)"
        head.headerFields[RequestID.field] = "r-1"
        head.headerFields[.date] = date
        try Self.send(channel, Self.get("/other"))
        _ = try Self.passedOn(channel)
        try channel.writeOutbound(HTTPResponsePart.head(head))
        try channel.writeOutbound(HTTPResponsePart.body(parts.body))
        try channel.writeOutbound(HTTPResponsePart.end(nil))
        let encoder = try Self.written(channel)
        let mine = ConstantDocumentHandler.encoded(
            ConstantDocumentHandler.prepare(api, recorder: nil), requestID: "r-1", date: date, allocator: .init())
        #expect(Array(mine.readableBytesView) == encoder, "\(String(decoding: encoder, as: UTF8.self))")
    }

    /// A connection keeps its answer's bytes but for the request id and the date, until the document changes
    /// (a signing key rotated): the next request on the same connection gets the new one.
    @Test func aChangedDocumentIsAnsweredAtOnce() throws {
        let current = NIOLockedValueBox(Self.document)
        let channel = try Self.pipeline(document: current)
        try Self.send(channel, Self.get("/doc") + Self.get("/doc"))
        #expect(try Self.answers(channel).map(\.body) == [Self.document, Self.document])
        // As long as the old one: the handler must compare the bytes, not their length.
        let rotated = Array(#"{"kid":"a"}"#.utf8) + [0x0A]
        try #require(rotated.count == Self.document.count && rotated != Self.document)
        current.withLockedValue { $0 = rotated }
        try Self.send(channel, Self.get("/doc"))
        let answer = try #require(try Self.answers(channel).first)
        #expect(answer.body == rotated)
        #expect(answer.header("Content-Length") == "\(rotated.count)")
    }

    /// Every case the handler leaves to the router reaches it whole and unchanged, and the handler writes
    /// nothing.
    @Test(arguments: [
        ("HEAD /doc", "", "", 2),
        ("POST /doc", "", "", 2),
        ("GET /doc?v=1", "", "", 2),
        ("GET /doc/", "", "", 2),
        ("GET /other", "", "", 2),
        ("GET /doc", "Connection: close\r\n", "", 2),
        ("GET /doc", "Connection: upgrade\r\n", "", 2),
        ("GET /doc", "Content-Length: 5\r\n", "hello", 3),
        ("GET /doc", "Transfer-Encoding: chunked\r\n", "0\r\nX-Trailer: x\r\n\r\n", 2),
    ])
    func whatItIsNotSureOfGoesToTheRouter(requestLine: String, fields: String, body: String, parts: Int) throws {
        let channel = try Self.pipeline()
        try Self.send(channel, "\(requestLine) HTTP/1.1\r\nHost: 127.0.0.1\r\n\(fields)\r\n\(body)")
        let passed = try Self.passedOn(channel)
        #expect(passed.count == parts, "\(passed)")
        guard case .head(let head) = passed.first else {
            Issue.record("the head did not reach the router: \(passed)")
            return
        }
        let target = requestLine.split(separator: " ")
        #expect(head.method.rawValue == target[0] && head.path == String(target[1]))
        if parts == 3, case .body(let bytes) = passed[1] { #expect(String(buffer: bytes) == "hello") }
        guard case .end(let trailers) = passed.last else {
            Issue.record("no end: \(passed)")
            return
        }
        #expect(body.contains("X-Trailer") == (trailers != nil))
        #expect(try Self.written(channel).isEmpty)
    }

    /// While a request that went to the router is unanswered, a document's request waits its turn there too:
    /// answers leave in the order the client pipelined the requests.
    @Test func answersKeepTheRequestsOrder() throws {
        let channel = try Self.pipeline()
        try Self.send(channel, Self.get("/other") + Self.get("/doc"))
        #expect(try Self.passedOn(channel).count == 4, "both requests go to the router")
        #expect(try Self.written(channel).isEmpty)

        // The router answers the first; the second is still its own.
        try Self.routerAnswers(channel, status: .notFound)
        try Self.send(channel, Self.get("/doc"))
        #expect(try Self.passedOn(channel).count == 2, "one answer is still owed")
        #expect(try Self.answers(channel).map(\.status) == [404])

        // Both answered: the next one is the handler's.
        try Self.routerAnswers(channel)
        try Self.routerAnswers(channel)
        #expect(try Self.answers(channel).map(\.status) == [200, 200])
        try Self.send(channel, Self.get("/doc"))
        #expect(try Self.passedOn(channel).isEmpty)
        #expect(try Self.answers(channel).map(\.body) == [Self.document])
    }

    /// A server winding down closes an idle connection (Hummingbird's connection-state handler, after the
    /// documents' handler): between two of its requests a connection is idle, and nothing more is answered.
    @Test func windingDownClosesAnIdleConnection() throws {
        let channel = try Self.pipeline()
        try Self.send(channel, Self.get("/doc"))
        #expect(try Self.answers(channel).count == 1)
        channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        #expect(!channel.isActive)
        #expect(try Self.written(channel).isEmpty)
    }

    /// The request deadline (`server.request_timeout`) runs from the end of each answer, the handler's too: a
    /// connection asking for documents stays open past the deadline as long as each request comes in time, and
    /// is closed once one does not.
    @Test func theConnectionGuardSeesItsRequests() throws {
        let channel = try Self.pipeline(requestTimeout: 30)
        for _ in 0..<3 {
            channel.embeddedEventLoop.advanceTime(by: .seconds(20))
            #expect(channel.isActive)
            try Self.send(channel, Self.get("/doc"))
            #expect(try Self.answers(channel).count == 1)
        }
        Self.expectClosed(channel, in: 30)
    }

    /// The same deadline while the router handles requests: stopped while a request is being handled however
    /// long it takes, running again from the end of its answer.
    @Test func theDeadlineStopsWhileTheRouterWorks() throws {
        let channel = try Self.pipeline(requestTimeout: 30)
        channel.embeddedEventLoop.advanceTime(by: .seconds(25))
        try Self.send(channel, Self.get("/other"))
        channel.embeddedEventLoop.advanceTime(by: .seconds(100))
        #expect(channel.isActive, "a request being handled is never cut off")
        try Self.routerAnswers(channel)
        Self.expectClosed(channel, in: 30)
    }

    /// The router may answer before a request's body has all arrived (a 413 for a declared length too large):
    /// when the rest of the body comes, the connection is waiting for its next request, and the deadline runs.
    @Test func anEarlyAnswerLeavesTheDeadlineRunning() throws {
        let channel = try Self.pipeline(requestTimeout: 30)
        try Self.send(channel, "POST /other HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\nhello")
        try Self.routerAnswers(channel, status: .contentTooLarge)
        try Self.send(channel, "world")
        #expect(try Self.passedOn(channel).count == 4)
        // The documents are the handler's again: nothing is owed.
        try Self.send(channel, Self.get("/doc"))
        #expect(try Self.answers(channel).map(\.status) == [413, 200])
        // An idle connection after an early answer is still closed at its deadline.
        Self.expectClosed(channel, in: 30)
    }

    /// Above the connection cap the guard's 503 is the answer, not the document.
    @Test func aboveTheCapTheGuardAnswers() throws {
        let channel = try Self.pipeline(limit: 0)
        try Self.send(channel, Self.get("/doc"))
        #expect(try Self.answers(channel).map(\.status) == [503])
        #expect(try Self.passedOn(channel).isEmpty)
    }

    static var imfFixdate: DateFormatter {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter
    }

    /// `Date` as RFC 9110 writes it, against Python's `email.utils.formatdate(usegmt=True)` and Foundation's
    /// formatter over a century of instants.
    @Test func theDateFieldIsIMFFixdate() {
        #expect(HTTPDate.text(secondsSince1970: 0) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.text(secondsSince1970: 951_782_400) == "Tue, 29 Feb 2000 00:00:00 GMT")
        #expect(HTTPDate.text(secondsSince1970: 1_795_000_000) == "Wed, 18 Nov 2026 11:06:40 GMT")
        #expect(HTTPDate.text(secondsSince1970: 4_102_444_799) == "Thu, 31 Dec 2099 23:59:59 GMT")
        let formatter = Self.imfFixdate
        for _ in 0..<2000 {
            let seconds = Int.random(in: 0...4_102_444_799)
            #expect(
                HTTPDate.text(secondsSince1970: seconds)
                    == formatter.string(from: Date(timeIntervalSince1970: TimeInterval(seconds))))
        }
    }

    // MARK: - `broker serve`'s server on a real port

    /// Byte for byte the router's answer (`?via=router` sends the same request the router's way), for both
    /// documents; only the request id differs, and a client's own id comes back either way.
    @Test func theSameAnswerEitherWay() async throws {
        let broker = try await InProcessBroker()
        try await broker.live { _, base in
            let port = try #require(URLComponents(string: base)?.port)
            let connection = try RawHTTPConnection(port: port)
            var requests = ""
            for path in [
                "/.well-known/jwks.json", "/.well-known/openid-configuration",
                "/.well-known/oauth-authorization-server",
            ] {
                for suffix in ["", "?via=router"] {
                    requests +=
                        "GET \(path)\(suffix) HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: r-\(suffix.count)\r\n\r\n"
                }
            }
            try await connection.send(requests)
            let answers = try await connection.answers(6)
            // RFC 8414's metadata is the OpenID document, byte for byte.
            #expect(answers[4].body == answers[2].body && !answers[4].body.isEmpty)
            for pair in [(answers[0], answers[1]), (answers[2], answers[3]), (answers[4], answers[5])] {
                #expect(pair.0.status == 200)
                #expect(pair.0.statusLine == pair.1.statusLine)
                #expect(pair.0.body == pair.1.body)
                // Request ids differ; `Date` may be a second apart.
                func withoutID(_ answer: RawHTTPConnection.Answer) -> [String] {
                    answer.headers.map {
                        ["X-Request-Id", "Date"].contains($0.name) ? $0.name : "\($0.name): \($0.value)"
                    }
                }
                for answer in [pair.0, pair.1] {
                    let date = try #require(answer.header("Date"))
                    let parsed = try #require(Self.imfFixdate.date(from: date), "\(date)")
                    #expect(abs(parsed.timeIntervalSinceNow) < 3600)
                }
                #expect(withoutID(pair.0) == withoutID(pair.1))
                #expect(pair.0.header("X-Request-Id") == "r-0")
                #expect(pair.1.header("X-Request-Id") == "r-11")
            }
            #expect(JSONValue.parse(answers[0].body)?["keys"]?.arrayValue?.isEmpty == false)
            #expect(JSONValue.parse(answers[2].body)?["issuer"]?.stringValue == broker.service.issuer)
        }
    }

    /// Requests pipelined in one write, the router's and the handler's mixed, a body on a document's `GET`,
    /// and a `Connection: close` at the end: every answer, in order, then the close.
    @Test func pipelinedRequestsAreAnsweredInOrder() async throws {
        let broker = try await InProcessBroker()
        try await broker.live { _, base in
            let port = try #require(URLComponents(string: base)?.port)
            let connection = try RawHTTPConnection(port: port)
            let host = "Host: 127.0.0.1\r\n"
            try await connection.send(
                "GET /auth/me HTTP/1.1\r\n\(host)\r\n"
                    + "GET /.well-known/jwks.json HTTP/1.1\r\n\(host)\r\n"
                    + "POST /auth/token HTTP/1.1\r\n\(host)Content-Type: application/x-www-form-urlencoded\r\n"
                    + "Content-Length: 18\r\n\r\ngrant_type=unknown"
                    + "POST /auth/token HTTP/1.1\r\n\(host)Content-Type: application/x-www-form-urlencoded\r\n"
                    + "Content-Length: 0\r\n\r\n"
                    + "POST /auth/token HTTP/1.1\r\n\(host)Content-Type: application/x-www-form-urlencoded\r\n"
                    + "Transfer-Encoding: chunked\r\n\r\nb\r\ngrant_type=\r\n7\r\nunknown\r\n0\r\n\r\n"
                    + "GET /.well-known/openid-configuration HTTP/1.1\r\n\(host)\r\n"
                    + "GET /.well-known/jwks.json HTTP/1.1\r\n\(host)Content-Length: 5\r\n\r\nhello"
                    + "GET /.well-known/jwks.json HTTP/1.1\r\n\(host)Connection: keep-alive\r\n\r\n"
                    + "GET /.well-known/jwks.json HTTP/1.1\r\n\(host)Connection: close\r\n\r\n"
                    + "GET /.well-known/jwks.json HTTP/1.1\r\n\(host)\r\n")
            let answers = try await connection.answers(9)
            #expect(answers.map(\.status) == [401, 200, 400, 400, 400, 200, 200, 200, 200])
            #expect(JSONValue.parse(answers[1].body)?["keys"] != nil)
            #expect(JSONValue.parse(answers[2].body)?["error"]?.stringValue == "unsupported_grant_type")
            // An empty body (read not at all: its declared length is 0), and a chunked one (read to its end).
            #expect(JSONValue.parse(answers[3].body)?["error"]?.stringValue == "invalid_request")
            #expect(JSONValue.parse(answers[4].body)?["error"]?.stringValue == "unsupported_grant_type")
            #expect(JSONValue.parse(answers[5].body)?["issuer"]?.stringValue == broker.service.issuer)
            for index in [6, 7, 8] { #expect(answers[index].body == answers[1].body) }
            #expect(try await connection.closedByServer(), "nothing after the request that said close")
        }
    }

    /// The handler's requests are counted under their route and logged like any other, with the request id
    /// the answer carries.
    @Test func itsRequestsAreCountedAndLogged() async throws {
        let capture = VisibleTextTests.Capture()
        var logger = Logger(label: "test") { _ in VisibleTextTests.CapturingHandler(capture: capture) }
        logger.logLevel = .info
        let broker = try await InProcessBroker()
        try await broker.live(logger: logger) { client, base in
            let port = try #require(URLComponents(string: base)?.port)
            let label = #"broker_http_requests_total{route="/.well-known/jwks.json",method="GET",status="2xx"}"#
            let before = MetricsTests.samples(try await client.get("/metrics").body)[label] ?? 0
            let connection = try RawHTTPConnection(port: port)
            try await connection.send(
                String(repeating: "GET /.well-known/jwks.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", count: 3))
            let ids = try await connection.answers(3).compactMap { $0.header("X-Request-Id") }
            #expect(ids.count == 3 && Set(ids).count == 3)
            let after = MetricsTests.samples(try await client.get("/metrics").body)[label] ?? 0
            #expect(after - before == 3)
            let lines = capture.lines
            for id in ids {
                let line = lines.first { $0.contains("request_id=\(id)") }
                #expect(line?.hasPrefix("request ") == true, "\(lines)")
                #expect(line?.contains("http.path=/.well-known/jwks.json") == true)
                #expect(line?.contains("http.status=200") == true)
                #expect(line?.contains("http.method=GET") == true)
            }
        }
    }

    /// The discovery document is made once and kept while the signing algorithms it lists stay the same: the
    /// same bytes (the same array, so every connection's prepared answer stays), made again when a rotation
    /// changes what it lists.
    @Test func theDiscoveryDocumentIsMadeAgainOnlyWhenItsAlgorithmsChange() async throws {
        let master = Array(repeating: UInt8(9), count: 32)
        let directory = try TemporaryDirectory.make(prefix: "broker-discovery")
        let store = try SQLiteStore(path: directory.appendingPathComponent("broker.sqlite3").path)
        let broker = try await InProcessBroker(shared: (store: store, master: master))
        let first = broker.service.discovery.discovery()
        let again = broker.service.discovery.discovery()
        let bytes = try #require(first.serialized)
        #expect(bytes == first.body.serializedBytes + [0x0A], "the body as it is sent, with its newline")
        let sameStorage = bytes.withUnsafeBufferPointer { mine in
            again.serialized?.withUnsafeBufferPointer { $0.baseAddress == mine.baseAddress } ?? false
        }
        #expect(sameStorage, "the same array: made once")
        #expect(first.body["access_token_signing_alg_values_supported"] == .array(["ES256"]))

        // An Ed25519 key rotates in; the ES256 key stays published for its retention: both are listed.
        let vault = KeyVault(
            store: store, master: MasterKey(bytes: master, origin: "test master key"), legacyDataDirectory: nil)
        _ = try await vault.rotate(
            kind: .ed25519, now: broker.clock.seconds(), retention: broker.service.keys.retention)
        #expect(try await broker.service.keys.refresh(now: broker.clock.seconds()))
        let rotated = broker.service.discovery.discovery()
        #expect(rotated.body["access_token_signing_alg_values_supported"] == .array(["EdDSA", "ES256"]))
        #expect(rotated.serialized == rotated.body.serializedBytes + [0x0A])
        #expect(rotated.serialized != first.serialized)
        // Everything else is as it was.
        var others = rotated.body.objectValue ?? [:]
        var before = first.body.objectValue ?? [:]
        others["access_token_signing_alg_values_supported"] = nil
        before["access_token_signing_alg_values_supported"] = nil
        // Userinfo is signed as id tokens are: its list follows theirs.
        for derived in ["id_token_signing_alg_values_supported", "userinfo_signing_alg_values_supported"] {
            others[derived] = nil
            before[derived] = nil
        }
        #expect(others == before && !others.isEmpty)
    }

    /// With no issuer configured, the issuer is set once the port is bound (`--port 0`): a document made before
    /// that is not kept after it.
    @Test func theDiscoveryDocumentFollowsTheIssuerSetAtStart() async throws {
        let broker = try await InProcessBroker(issuer: nil)
        let before = broker.service.discovery.discovery()
        broker.service.serverStarted(host: "127.0.0.1", port: 4321)
        let after = broker.service.discovery.discovery()
        #expect(after.body["issuer"] == "http://127.0.0.1:4321")
        #expect(after.body["token_endpoint"] == "http://127.0.0.1:4321/auth/token")
        #expect(before.body["issuer"] != after.body["issuer"])
        #expect(after.serialized == after.body.serializedBytes + [0x0A])
    }
}
