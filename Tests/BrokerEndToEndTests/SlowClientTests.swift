import BrokerCore
import BrokerHTTP
import BrokerServer
import BrokerSystem
import BrokerTestSupport
import BrokerTesting
import Foundation
import Glibc
import Testing

/// Connection exhaustion ("Proof under fire", finding 1): half-sent requests held open, a request trickled a
/// byte at a time, and normal traffic beside them. Before the fix the broker stopped accepting at the
/// descriptor limit and, with traffic, died in libdispatch.
@Suite("broker serve under slow clients", .serialized)
struct SlowClientTests {
    struct Outcome {
        let json: JSONValue
        var normal: [Int] { json["normal"]?.arrayValue?.compactMap { $0.intValue.map(Int.init) } ?? [] }
        var normalErrors: [JSONValue] { json["normal_errors"]?.arrayValue ?? [] }
        func int(_ key: String) -> Int64? { json[key]?.intValue }
    }

    static func attack(_ server: BrokerProcess, hold: Int, normal: Int) async throws -> Outcome {
        let result = try await Interop.run([
            "slow_clients.py", server.url, "--hold", "\(hold)", "--normal", "\(normal)", "--trickle-interval", "0.25",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let json = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout) \(result.stderr)")
        return Outcome(json: json)
    }

    @Test(
        "twice the connection cap of half-sent requests: normal requests are answered or get a quick 503",
        .bug(id: 18, "finding 1: connection exhaustion stops the broker, then crashes it")
    )
    func halfSentRequestsAtTwiceTheCap() async throws {
        let server = try await BrokerProcess.start(
            config: #"{"server": {"max_connections": 40, "request_timeout": 2}}"#)
        defer { server.stop() }
        let outcome = try await Self.attack(server, hold: 80, normal: 30)
        #expect(outcome.normalErrors.isEmpty, "every normal request got an answer: \(outcome.normalErrors)")
        #expect(outcome.normal.count == 30)
        #expect(outcome.normal.allSatisfy { $0 == 200 || $0 == 503 }, "\(outcome.normal)")
        #expect(outcome.normal.contains(200), "slots freed by the deadline serve normal requests")
        #expect(outcome.int("held_closed") == 80, "the broker closed every half-sent request")
        #expect(outcome.json["trickle_closed"]?.boolValue == true, "a trickled request is cut off")
        let sent = try #require(outcome.int("trickle_sent"))
        #expect(sent < (outcome.int("trickle_total") ?? 0), "before it was complete")
        #expect(outcome.int("after") == 200)
        #expect(server.process.isRunning)
        #expect(try await server.get("/healthz").status == 200)
    }

    @Test(
        "at the descriptor limit the broker stops accepting instead of dying",
        .bug(id: 18, "finding 1: connection exhaustion stops the broker, then crashes it")
    )
    func descriptorLimit() async throws {
        // A hard limit of 300 descriptors: the cap in force becomes 300 - 128 reserved.
        let server = try await BrokerProcess.start(
            config: #"{"server": {"request_timeout": 2}}"#, wrapper: ["/usr/bin/prlimit", "--nofile=300:300", "--"])
        defer { server.stop() }
        let outcome = try await Self.attack(server, hold: 400, normal: 20)
        #expect(outcome.normalErrors.isEmpty, "\(outcome.normalErrors)")
        #expect(outcome.normal.allSatisfy { $0 == 200 || $0 == 503 }, "\(outcome.normal)")
        #expect(outcome.int("after") == 200)
        #expect(server.process.isRunning, "the broker survived: \(server.stderr.suffix(2000))")
        #expect(server.stderr.contains("max_connections lowered to fit the descriptor limit"))
    }

    @Test(
        "idle connections to the metrics port leave the main port, the store and the process alone",
        .bug(id: "RT2-9", "the metrics listener has no connection guard")
    )
    func metricsPortUnderIdleConnections() async throws {
        // 300 descriptors in all: before the guard, 400 idle connections to the metrics port took every one of
        // them, the main port stopped answering and SQLite could not open its files.
        let metricsPort = try freeLoopbackPort()
        let server = try await BrokerProcess.start(
            config: #"{"server": {"metrics_port": \#(metricsPort), "request_timeout": 600}}"#,
            wrapper: ["/usr/bin/prlimit", "--nofile=300:300", "--"])
        defer { server.stop() }
        var held: [Int32] = []
        defer { for descriptor in held { close(descriptor) } }
        for _ in 0..<250 { held.append(try connectWithoutWaiting(port: metricsPort)) }
        // Each asks for the metrics. The port serves its cap, answers a few more 503 at once, and accepts no
        // more (they wait in the kernel's queue); unguarded, it took every connection until descriptors ran out.
        let request = Array("GET /metrics HTTP/1.1\r\nHost: broker\r\n\r\n".utf8)
        var unsent = Set(held)
        #expect(
            try await eventually {
                for descriptor in unsent where Self.sendAll(descriptor, request) { unsent.remove(descriptor) }
                return unsent.isEmpty
            }, "every connection was made and sent its request")
        var statuses: [Int32: Int] = [:]
        #expect(
            try await eventually {
                for descriptor in held where statuses[descriptor] == nil {
                    if let status = Self.statusLine(descriptor) { statuses[descriptor] = status }
                }
                return statuses.count >= ConnectionLimits.metricsAcceptLimit
            }, "the metrics port answered its share")
        let answered = Array(statuses.values)
        #expect(answered.allSatisfy { $0 == 200 || $0 == 503 }, "\(answered)")
        #expect(answered.contains(503), "above its cap the metrics port says 503: \(answered.sorted())")
        #expect(
            answered.filter { $0 == 200 }.count <= ConnectionLimits.metricsMaxConnections,
            "it serves at most its cap at once")
        let pid = server.process.pid
        #expect(Self.openDescriptors(pid) < 150, "the metrics port holds at most its own share of descriptors")

        #expect(try await server.get("/healthz").status == 200, "the main port answers")
        var register = HTTPClientRequest(
            method: "POST", url: server.url + "/auth/register",
            headers: [(name: "Content-Type", value: "application/json")],
            body: Array(#"{"email":"beside@example.com","password":"correct horse battery staple"}"#.utf8))
        register.timeout = .seconds(120)
        #expect(try await HTTPClient.shared.send(register).status == 201, "the store still opens and writes")
        #expect(server.process.isRunning)

        for descriptor in held { close(descriptor) }
        held = []
        // The broker learns of each close when it reads the end of that connection, so a scrape sent at once
        // can still find the cap full and get 503; once the closes are read it serves again.
        var scrape = HTTPClientRequest(url: "http://127.0.0.1:\(metricsPort)/metrics")
        scrape.timeout = .seconds(120)
        var afterwards: [Int] = []
        #expect(
            try await eventually {
                let status = try await HTTPClient.shared.send(scrape).status
                afterwards.append(status)
                return status == 200
            }, "the metrics port serves again: \(afterwards)")
        #expect(afterwards.allSatisfy { $0 == 200 || $0 == 503 }, "\(afterwards)")
    }

    /// One request on a connection of its own from `source`; the response's status, or `nil` when the
    /// connection closed without one.
    static func request(from source: String, port: Int, _ text: String) async throws -> Int? {
        let descriptor = try connectWithoutWaiting(port: port, from: source)
        defer { close(descriptor) }
        let bytes = Array(text.utf8)
        var sent = false
        var status: Int?
        _ = try await eventually {
            if !sent { sent = sendAll(descriptor, bytes) }
            guard sent else { return false }
            status = statusLine(descriptor)
            if status != nil { return true }
            // A close without an answer: recv (peeking) reads 0 bytes.
            var byte: UInt8 = 0
            return recv(descriptor, &byte, 1, Int32(MSG_PEEK)) == 0
        }
        return status
    }

    /// RT2-10: one client address could hold every connection slot. Each source network now has a share of
    /// the cap (trusted proxies, which carry many clients, excepted), and behind one the client is the address
    /// it forwards.
    @Test(
        "one address holds at most its share of the connections",
        .bug(id: "RT2-10", "one client address can hold every connection slot")
    )
    func oneAddressHoldsAtMostItsShare() async throws {
        let server = try await BrokerProcess.start(
            config: #"""
                {"server": {"max_connections": 40, "max_connections_per_address": 4, "request_timeout": 600,
                            "trusted_proxies": ["127.0.0.1"], "registrations_per_hour": 2}}
                """#)
        defer { server.stop() }
        let port = try #require(Int(server.url.split(separator: ":").last ?? ""))
        let health = "GET /healthz HTTP/1.1\r\nHost: broker\r\nConnection: close\r\n\r\n"
        var held: [Int32] = []
        defer { for descriptor in held { close(descriptor) } }
        for _ in 0..<4 { held.append(try connectWithoutWaiting(port: port, from: "127.0.0.2")) }
        // The broker has counted the four once a fifth from elsewhere is answered (connections are accepted in
        // order on one listener).
        #expect(try await Self.request(from: "127.0.0.3", port: port, health) == 200)
        // (eventually: each connection is counted on its own event loop, a moment after it is accepted)
        #expect(
            try await eventually { try await Self.request(from: "127.0.0.2", port: port, health) == 503 },
            "over 127.0.0.2's share")
        #expect(try await Self.request(from: "127.0.0.3", port: port, health) == 200, "others are served")
        // A trusted proxy is exempt: ten at once from it are all served.
        var proxied: [Int32] = []
        defer { for descriptor in proxied { close(descriptor) } }
        for _ in 0..<10 { proxied.append(try connectWithoutWaiting(port: port, from: "127.0.0.1")) }
        #expect(try await Self.request(from: "127.0.0.1", port: port, health) == 200)
        for descriptor in held { close(descriptor) }
        held = []
        #expect(
            try await eventually { try await Self.request(from: "127.0.0.2", port: port, health) == 200 },
            "the share comes back as connections close")

        // Behind the trusted proxy, per-address limits count the forwarded client; a peer that is not trusted
        // cannot pick its address with the header.
        func register(from source: String, _ email: String, forwardedFor: String) async throws -> Int? {
            let body = #"{"email":"\#(email)","password":"correct horse battery staple"}"#
            return try await Self.request(
                from: source, port: port,
                "POST /auth/register HTTP/1.1\r\nHost: broker\r\nConnection: close\r\n"
                    + "Content-Type: application/json\r\nX-Forwarded-For: \(forwardedFor)\r\n"
                    + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)")
        }
        #expect(try await register(from: "127.0.0.1", "a1@example.com", forwardedFor: "198.51.100.1") == 201)
        #expect(try await register(from: "127.0.0.1", "a2@example.com", forwardedFor: "198.51.100.1") == 201)
        #expect(try await register(from: "127.0.0.1", "a3@example.com", forwardedFor: "198.51.100.1") == 429)
        #expect(
            try await register(from: "127.0.0.1", "b1@example.com", forwardedFor: "198.51.100.1, 198.51.100.2")
                == 201, "the rightmost untrusted address is the client")
        for index in 1...2 {
            #expect(
                try await register(from: "127.0.0.4", "c\(index)@example.com", forwardedFor: "203.0.113.\(index)")
                    == 201)
        }
        #expect(
            try await register(from: "127.0.0.4", "c3@example.com", forwardedFor: "203.0.113.3") == 429,
            "an untrusted peer's header changes nothing: 127.0.0.4 has used its two")
    }

    /// RT2-10, not yet closed in the second round: connections over their address's share were counted against
    /// `max_connections`, so 64 idle sockets from one address (cap 64) still got every other address a 503. One
    /// over its share takes no slot: it is answered 503 when its request head arrives, or closed unanswered after
    /// the short grace.
    @Test(.bug(id: "RT2-10", "connections over an address's share still took slots"))
    func connectionsOverTheShareTakeNoSlot() async throws {
        let server = try await BrokerProcess.start(
            config: #"{"server": {"max_connections": 16, "max_connections_per_address": 4, "request_timeout": 600}}"#)
        defer { server.stop() }
        let port = try #require(Int(server.url.split(separator: ":").last ?? ""))
        let health = "GET /healthz HTTP/1.1\r\nHost: broker\r\nConnection: close\r\n\r\n"
        var held: [Int32] = []
        defer { for descriptor in held { close(descriptor) } }
        for _ in 0..<16 { held.append(try connectWithoutWaiting(port: port, from: "127.0.0.2")) }
        // At once (connections are accepted in order on one listener, so the sixteen were counted first): before
        // the fix the sixteen filled the cap for their two seconds' grace, and this was a 503.
        #expect(try await Self.request(from: "127.0.0.3", port: port, health) == 200)
        // Twelve of them are over the share, and closed without an answer after the grace (never held for the
        // request timeout, 600 s here).
        #expect(
            try await eventually {
                held.filter { descriptor in
                    var byte: UInt8 = 0
                    return recv(descriptor, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) == 0
                }.count == 12
            }, "the twelve over the share were closed")
        for index in 0..<4 {
            #expect(
                try await Self.request(from: "127.0.0.3", port: port, health) == 200, "another address, \(index)")
        }
    }

    /// Sends `bytes` on a non-blocking socket once it is connected; `false` while it is still connecting.
    static func sendAll(_ descriptor: Int32, _ bytes: [UInt8]) -> Bool {
        let sent = bytes.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        return sent == bytes.count
    }

    /// The status of the response waiting on a non-blocking socket, if a status line has arrived.
    static func statusLine(_ descriptor: Int32) -> Int? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, Int32(MSG_PEEK)) }
        guard count > 12 else { return nil }
        let line = String(decoding: buffer.prefix(count), as: UTF8.self)
        guard line.hasPrefix("HTTP/1.1 ") else { return nil }
        return Int(line.dropFirst(9).prefix(3))
    }

    /// How many descriptors process `pid` has open.
    static func openDescriptors(_ pid: Int32) -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? 0
    }
}
