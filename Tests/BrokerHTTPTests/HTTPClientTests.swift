import BrokerCore
import BrokerHTTP
import BrokerSystem
import BrokerTesting
import Foundation
import Synchronization
import Testing

/// A real HTTP server on 127.0.0.1 (Tests/Interop/http_fixture_server.py), started once for the process,
/// off Swift's cooperative pool.
final class FixtureServer: @unchecked Sendable {
    /// Its stdin stays open for the whole run: the script ends when it reads end of file.
    let process: ChildProcess
    let port: Int

    private init() throws {
        process = try ChildProcess(
            ProcessInfo.processInfo.environment["BROKER_PYTHON"] ?? "python3",
            [TestPaths.interop("http_fixture_server.py")],
            stdin: .pipe, stdout: .pipe)
        let text = (process.readOutputLine() ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.hasPrefix("port "), let port = Int(text.dropFirst(5)) else {
            throw HTTPTestError("fixture server did not start: \(text)")
        }
        self.port = port
    }

    func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }

    private static let started = Mutex<Task<FixtureServer, any Error>?>(nil)

    /// The one server, started on a thread of its own the first time it is asked for.
    static func shared() async throws -> FixtureServer {
        let task = started.withLock { task in
            if let task { return task }
            let created = Task { try await offThread { try FixtureServer() } }
            task = created
            return created
        }
        return try await task.value
    }
}

struct HTTPTestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

@Suite("HTTPClient on libcurl against a real loopback server")
struct HTTPClientTests {
    let server: FixtureServer
    let client = HTTPClient()

    init() async throws {
        server = try await FixtureServer.shared()
    }

    @Test("statuses come back as responses, not errors", arguments: [200, 201, 204, 400, 401, 404, 429, 500, 503])
    func statuses(status: Int) async throws {
        let response = try await client.send(HTTPClientRequest(url: server.url("/status/\(status)")))
        #expect(response.status == status)
        if status != 204 { #expect(response.bodyText == "status \(status)") }
    }

    @Test func requestAndResponseHeaders() async throws {
        var request = HTTPClientRequest(url: server.url("/echo"), headers: [(name: "X-Custom", value: "hello world")])
        request.method = "PUT"
        request.body = Array("payload".utf8)
        let response = try await client.send(request)
        let echo = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]
        #expect(echo?["method"] as? String == "PUT")
        #expect(echo?["body"] as? String == "payload")
        #expect((echo?["headers"] as? [String: String])?["X-Custom"] == "hello world")
        #expect(response.header("content-type") == "application/json")

        let headers = try await client.send(HTTPClientRequest(url: server.url("/headers")))
        #expect(headers.header("x-one") == "1")
        #expect(headers.headers.filter { $0.name.lowercased() == "set-cookie" }.map(\.value) == ["a=1", "b=2"])
        #expect(headers.header("X-Spaced") == "padded value")
    }

    @Test func formPost() async throws {
        let response = try await client.send(
            .form(url: server.url("/echo"), fields: [("grant_type", "refresh_token"), ("token", "a b&c=d/é")]))
        let echo = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]
        #expect(echo?["method"] as? String == "POST")
        #expect(echo?["body"] as? String == "grant_type=refresh_token&token=a%20b%26c%3Dd%2F%C3%A9")
        #expect((echo?["headers"] as? [String: String])?["Content-Type"] == "application/x-www-form-urlencoded")
        #expect((echo?["headers"] as? [String: String])?["Expect"] == nil)
    }

    @Test("large bodies arrive whole", arguments: ["/bytes/", "/chunked/"])
    func largeBodies(path: String) async throws {
        let size = 3 * 1024 * 1024
        let response = try await client.send(HTTPClientRequest(url: server.url("\(path)\(size)")))
        #expect(response.status == 200 && response.body.count == size)
        #expect(response.body.allSatisfy { $0 == UInt8(ascii: "x") })
    }

    @Test("oversized responses fail, with or without Content-Length", arguments: ["/bytes/", "/chunked/"])
    func oversized(path: String) async throws {
        var request = HTTPClientRequest(url: server.url("\(path)200000"))
        request.maxResponseBytes = 100_000
        await #expect(throws: HTTPClientError(kind: .responseTooLarge, message: "")) { try await client.send(request) }
    }

    @Test func timeout() async throws {
        // The server never answers (it holds the request until released, long after the test): only curl's
        // own timeout can end the transfer, so the error proves the timeout without timing anything here.
        let name = "timeout-\(UUID().uuidString)"
        var request = HTTPClientRequest(url: server.url("/hold/\(name)"))
        request.timeout = .milliseconds(300)
        await #expect {
            try await client.send(request)
        } throws: { error in
            guard let error = error as? HTTPClientError else { return false }
            return error.kind == .timeout && error.message.contains("timed out")
        }
        _ = try await client.send(HTTPClientRequest(url: server.url("/release/\(name)")))
    }

    @Test func refusedConnection() async throws {
        // Bind a port, then close it: nothing listens there now.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        let port = Int(UInt16(bigEndian: address.sin_port))
        close(fd)
        do {
            _ = try await client.send(HTTPClientRequest(url: "http://127.0.0.1:\(port)/"))
            Issue.record("connected to a closed port")
        } catch let error as HTTPClientError {
            #expect(error.kind == .connectionFailed)
            #expect(!error.message.isEmpty, "carries curl's message")
        }
    }

    @Test func redirectsOnlyWhenAsked() async throws {
        let plain = try await client.send(HTTPClientRequest(url: server.url("/redirect")))
        #expect(plain.status == 302 && plain.header("location") == "/status/200")
        var follow = HTTPClientRequest(url: server.url("/redirect"))
        follow.followRedirects = true
        let followed = try await client.send(follow)
        #expect(followed.status == 200 && followed.bodyText == "status 200")
        var loop = HTTPClientRequest(url: server.url("/redirect-loop"))
        loop.followRedirects = true
        await #expect(throws: HTTPClientError(kind: .tooManyRedirects, message: "")) { try await client.send(loop) }
    }

    @Test(
        "only http and https; no header injection",
        arguments: ["ftp://127.0.0.1/x", "file:///etc/passwd", "gopher://x", "not a url"])
    func refusesOtherSchemes(url: String) async throws {
        await #expect(throws: HTTPClientError(kind: .invalidURL, message: "")) {
            try await client.send(HTTPClientRequest(url: url))
        }
    }

    @Test func refusesHeaderInjection() async throws {
        let request = HTTPClientRequest(
            url: server.url("/echo"), headers: [(name: "X-A", value: "1\r\nX-Injected: yes")])
        await #expect(throws: HTTPClientError(kind: .invalidURL, message: "")) { try await client.send(request) }
    }

    @Test("tls errors surface as .tls, verification cannot be disabled")
    func unreachableTLS() async throws {
        // Plain HTTP spoken to an https URL fails the TLS handshake.
        var request = HTTPClientRequest(url: "https://127.0.0.1:\(server.port)/status/200")
        request.timeout = .seconds(60)  // the handshake fails as soon as the server answers
        do {
            _ = try await client.send(request)
            Issue.record("TLS to a plain HTTP server succeeded")
        } catch let error as HTTPClientError {
            #expect(error.kind == .tls || error.kind == .transport, "\(error.kind): \(error.message)")
        }
    }

    /// A URL someone else chose (an app's metadata document): no socket is opened to a loopback address, however
    /// the host is written — as an address, as a name, as an IPv4-mapped IPv6 literal — and a connection the
    /// handle keeps from an earlier request to the same server is not reused.
    @Test func publicAddressesOnlyRefusesLoopbackHoweverItIsNamed() async throws {
        let warm = try await client.send(HTTPClientRequest(url: server.url("/status/200")))
        #expect(warm.status == 200)
        for url in [
            server.url("/status/200"), "http://localhost:\(server.port)/status/200",
            "http://[::ffff:127.0.0.1]:\(server.port)/status/200",
        ] {
            var request = HTTPClientRequest(url: url)
            request.publicAddressesOnly = true
            do {
                _ = try await client.send(request)
                Issue.record("\(url): connected to a loopback address")
            } catch let error as HTTPClientError {
                #expect(error.kind == .forbiddenAddress, "\(url): \(error.kind) \(error.message)")
                #expect(error.message.contains("not a public address"))
            }
        }
        // The same request without the rule goes through: the rule, not the server, refused.
        #expect(try await client.send(HTTPClientRequest(url: server.url("/status/200"))).status == 200)
    }

    @Test func whichAddressesArePublic() {
        func v4(_ text: String) -> [UInt8] { text.split(separator: ".").map { UInt8($0)! } }
        for address in ["8.8.8.8", "1.1.1.1", "203.0.114.1", "100.128.0.1", "172.32.0.1"] {
            #expect(PublicAddress.isPublic(v4(address)), "\(address)")
        }
        for address in [
            "0.0.0.0", "10.1.2.3", "127.0.0.1", "169.254.169.254", "172.16.0.1", "172.31.255.255", "192.168.1.1",
            "100.64.0.1", "192.0.2.1", "198.18.0.1", "224.0.0.1", "255.255.255.255",
        ] {
            #expect(!PublicAddress.isPublic(v4(address)), "\(address)")
        }
        func v6(_ head: [UInt8], tail: [UInt8] = []) -> [UInt8] {
            head + [UInt8](repeating: 0, count: 16 - head.count - tail.count) + tail
        }
        #expect(PublicAddress.isPublic(v6([0x26, 0x06, 0x47, 0x00], tail: [1])), "2606:4700::1")
        #expect(!PublicAddress.isPublic(v6([], tail: [1])), "::1")
        #expect(!PublicAddress.isPublic(v6([], tail: [0, 0, 0xFF, 0xFF, 127, 0, 0, 1])), "::ffff:127.0.0.1")
        #expect(PublicAddress.isPublic(v6([], tail: [0, 0, 0xFF, 0xFF, 8, 8, 8, 8])), "::ffff:8.8.8.8")
        #expect(!PublicAddress.isPublic(v6([0x00, 0x64, 0xFF, 0x9B], tail: [10, 0, 0, 1])), "64:ff9b::10.0.0.1")
        #expect(!PublicAddress.isPublic(v6([0x20, 0x02, 192, 168, 0, 1])), "2002:c0a8:1::")
        #expect(!PublicAddress.isPublic(v6([0xFD, 0x00])), "fd00::")
        #expect(!PublicAddress.isPublic(v6([0xFE, 0x80])), "fe80::")
        #expect(!PublicAddress.isPublic(v6([0xFF, 0x02])), "ff02::")
        #expect(!PublicAddress.isPublic(v6([0x20, 0x01, 0x0D, 0xB8])), "2001:db8::")
        #expect(!PublicAddress.isPublic([1, 2, 3]))
    }

    @Test func manyConcurrentRequests() async throws {
        let client = self.client
        let server = self.server
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<64 {
                group.addTask {
                    try await client.send(HTTPClientRequest(url: server.url("/status/\(200 + index % 3)"))).status
                }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(statuses.count == 64 && Set(statuses) == [200, 201, 202])
    }

    @Test("slow transfers do not hold up other requests, whatever the core count")
    func slowTransfersDoNotBlockOthers() async throws {
        let client = self.client
        let server = self.server
        let name = "slow-\(UUID().uuidString)"
        let finishedSlow = Counter()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var request = HTTPClientRequest(url: server.url("/hold/\(name)"))
                    request.timeout = .seconds(300)
                    let status = try await client.send(request).status
                    #expect(status == 200)
                    finishedSlow.value.add(1, ordering: .relaxed)
                }
            }
            // Ordering, not time: all eight are in flight, held by the server until released; the fast
            // request must complete meanwhile (it would never complete if slow transfers held every thread).
            var held = HTTPClientRequest(url: server.url("/held/\(name)/8"))
            held.timeout = .seconds(300)
            #expect(try await client.send(held).status == 200, "the server holds all eight")
            let fast = try await client.send(HTTPClientRequest(url: server.url("/status/200")))
            #expect(fast.status == 200)
            #expect(finishedSlow.value.load(ordering: .relaxed) == 0, "the slow ones are still held")
            _ = try await client.send(HTTPClientRequest(url: server.url("/release/\(name)")))
            try await group.waitForAll()
        }
        #expect(finishedSlow.value.load(ordering: .relaxed) == 8)
    }

    @Test func cancellationStopsATransfer() async throws {
        let client = self.client
        // The server never answers until released: only the cancellation can end the transfer.
        let name = "cancel-\(UUID().uuidString)"
        let url = server.url("/hold/\(name)")
        let task = Task { try await client.send(HTTPClientRequest(url: url)) }
        var held = HTTPClientRequest(url: server.url("/held/\(name)/1"))
        held.timeout = .seconds(300)
        #expect(try await client.send(held).status == 200, "the transfer is in flight")
        task.cancel()
        await #expect(throws: HTTPClientError(kind: .cancelled, message: "")) { try await task.value }
        _ = try await client.send(HTTPClientRequest(url: server.url("/release/\(name)")))
    }
}

@Suite("Form encoding")
struct FormEncodingTests {
    @Test func percentEncodingIsRFC3986Unreserved() {
        #expect(FormEncoding.percentEncode("Dogs, Cats & Mice") == "Dogs%2C%20Cats%20%26%20Mice")
        #expect(FormEncoding.percentEncode("☃") == "%E2%98%83")
        #expect(FormEncoding.percentEncode("a-b.c_d~e") == "a-b.c_d~e")
    }

    @Test func decodeRoundTripAndErrors() throws {
        let fields = [("a", "1 2"), ("b", "é&="), ("c", "")]
        let decoded = try #require(FormEncoding.decode(FormEncoding.encode(fields)))
        #expect(decoded.map { $0.0 } == ["a", "b", "c"] && decoded.map { $0.1 } == ["1 2", "é&=", ""])
        #expect(FormEncoding.decode("a=b+c")?.first?.1 == "b c")
        #expect(FormEncoding.decode("a=%ZZ") == nil)
        #expect(FormEncoding.decode("a=%C3") == nil)
    }

    /// The one-pass decoder against the specification written plainly (split on `&`, empty pairs skipped, the
    /// first `=` separates, each side percent-decoded and checked as UTF-8), on the edges of that rule.
    @Test func theOnePassDecoderAgreesWithTheRuleWrittenPlainly() {
        func plain(_ bytes: [UInt8]) -> [(String, String)]? {
            var fields: [(String, String)] = []
            for pair in bytes.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
                let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
                func decode(_ part: ArraySlice<UInt8>) -> String? {
                    var out: [UInt8] = []
                    var index = part.startIndex
                    while index < part.endIndex {
                        let byte = part[index]
                        if byte == UInt8(ascii: "%") {
                            func hex(_ byte: UInt8) -> UInt8? {
                                switch byte {
                                case 0x30...0x39: byte - 0x30
                                case 0x41...0x46: byte - 0x41 + 10
                                case 0x61...0x66: byte - 0x61 + 10
                                default: nil
                                }
                            }
                            guard index + 2 < part.endIndex, let high = hex(part[index + 1]),
                                let low = hex(part[index + 2])
                            else { return nil }
                            out.append(high << 4 | low)
                            index += 3
                        } else {
                            out.append(byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
                            index += 1
                        }
                    }
                    return String(validating: out, as: UTF8.self)
                }
                guard let name = decode(parts[0]) else { return nil }
                guard let value = parts.count > 1 ? decode(parts[1]) : "" else { return nil }
                fields.append((name, value))
            }
            return fields
        }
        let inputs: [[UInt8]] =
            [
                "", "&&", "=", "a", "a=", "=b", "a==b", "a=b&c=d", "&a=1&", "%26=%3D", "a+b=c+d", "a=%ZZ", "a=%C3",
                "a=%C3%A9", "%", "%4", "a=%4", "a=%+1", "a=%-1", "é=ü", "a=1&&b=2", "a=%e2%98%83",
            ].map { Array($0.utf8) } + [[0xFF], [UInt8(ascii: "a"), UInt8(ascii: "="), 0xC3], [0x3D, 0xFE]]
        for input in inputs {
            let expected = plain(input)
            let decoded = FormEncoding.decode(bytes: input)
            #expect(
                decoded?.map { "\($0.0)=\($0.1)" } == expected?.map { "\($0.0)=\($0.1)" },
                "\(input): \(String(describing: decoded)) against \(String(describing: expected))")
        }
    }
}

/// A counter tasks can share.
final class Counter: Sendable {
    let value = Atomic<Int>(0)
}
