import BrokerCore
import BrokerSystem
import BrokerTesting
import Foundation
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
}
