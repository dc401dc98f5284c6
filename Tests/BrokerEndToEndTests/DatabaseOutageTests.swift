import BrokerCore
import BrokerStore
import BrokerSystem
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

extension LoadTests {
    /// Stops the test cluster under a `wrk` run against two brokers, then starts it again. It runs in the load
    /// phase of scripts/test.sh, alone, because it takes the shared cluster away from every other test.
    @Test func theDatabaseStoppedAndStartedUnderWrk() async throws {
        let shared = try await ScaleOutProcessTests.Shared.make()
        // A short store deadline keeps the outage's answers quick (through the environment, which outranks the
        // minute the other scale-out tests' environment gives); the throttle is not what is measured.
        let config = #"{"server": {"login_throttle": false}}"#
        let quick = ["BROKER_SERVER_DATABASE_TIMEOUT": "2"]
        let a = try await shared.serve(config: config, environment: quick)
        defer { a.stop() }
        let b = try await shared.serve(config: config, environment: quick)
        defer { b.stop() }
        #expect(try await a.register("outage@example.com", Self.password).status == 201)
        // Two wrk processes (one per broker), two threads of one connection each: four refresh chains.
        var tokens: [String] = []
        for index in 0..<4 {
            let session = try await (index % 2 == 0 ? a : b).login("outage@example.com", Self.password)
            tokens.append(try #require(session["refresh_token"]?.stringValue))
        }
        let work = shared.directory
        let phaseFile = work.appendingPathComponent("phase").path
        let seenPrefix = work.appendingPathComponent("seen").path
        func setPhase(_ phase: String) throws {
            try Data((phase + "\n").utf8).write(to: URL(fileURLWithPath: phaseFile), options: .atomic)
        }
        try setPhase("before")
        let script = TestPaths.repositoryRoot.appendingPathComponent("Tests/Interop/outage.lua").path
        func wrk(_ server: BrokerProcess, tokens: ArraySlice<String>, name: String) throws -> Task<
            ProcessOutput, any Error
        > {
            let file = work.appendingPathComponent("tokens-\(name)").path
            try Data((tokens.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: file))
            // wrk runs for its whole -d even when every thread has stopped; SIGINT ends it early (its summary
            // and done() still run), so a small shell sends it once the phase says "stop". The test process's
            // threads block SIGINT and children inherit that mask, so Python unblocks it before exec'ing wrk;
            // and `set -m`, because a script's background job otherwise starts with SIGINT ignored.
            let watcher = """
                set -m
                python3 -c 'import os, signal, sys
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
                os.execvp("wrk", sys.argv[1:])' -t2 -c2 -d300s --timeout 30s -s "$1" "$2" & pid=$!
                until [ "$(cat "$OUTAGE_PHASE" 2>/dev/null)" = stop ] || ! kill -0 $pid 2>/dev/null; do sleep 0.2; done
                kill -INT $pid 2>/dev/null; wait $pid
                """
            return Task {
                try await ProcessRunner.run(
                    "/bin/bash", ["-c", watcher, "wrk", script, server.url],
                    environment: [
                        "REFRESH_TOKENS": file, "OUTAGE_PHASE": phaseFile, "OUTAGE_SEEN": seenPrefix + "-" + name,
                    ], timeout: .seconds(400))
            }
        }
        let runs = [try wrk(a, tokens: tokens[0..<2], name: "a"), try wrk(b, tokens: tokens[2..<4], name: "b")]
        defer { try? setPhase("stop") }

        func rotations() async throws -> Int {
            try await PostgresReader.count(shared.url, "refresh_tokens")
        }
        /// Waits (polling, never for a fixed time) until the brokers have rotated `count` more tokens.
        func awaitRotations(_ count: Int) async throws {
            let start = try await rotations()
            for _ in 0..<1200 {
                if try await rotations() >= start + count { return }
                try await Task.sleep(for: .milliseconds(100))
            }
            Issue.record("the brokers did not rotate \(count) refresh tokens")
        }
        func awaitHealth(_ status: Int) async throws {
            for server in [a, b] {
                var last = 0
                for _ in 0..<1200 {
                    do {
                        last = try await server.get("/healthz").status
                    } catch {
                        // A broker that stopped answering: what it said on its way out is the diagnosis.
                        Issue.record(
                            "/healthz of \(server.url): \(error); \(Self.lastWords(server.stderr))")
                        throw error
                    }
                    if last == status { break }
                    try await Task.sleep(for: .milliseconds(100))
                }
                #expect(last == status, "/healthz of \(server.url)")
            }
        }

        try await awaitRotations(40)
        try setPhase("down")
        try await TestPostgres.stopServer()
        try await awaitHealth(503)
        // Every wrk thread has had a 503 before the database comes back.
        let seen = ["a", "b"].flatMap { name in (0..<2).map { "\(seenPrefix)-\(name)-\($0)" } }
        for _ in 0..<1200 where !seen.allSatisfy({ FileManager.default.fileExists(atPath: $0) }) {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(seen.allSatisfy { FileManager.default.fileExists(atPath: $0) }, "the outage reached every chain")
        try await TestPostgres.startServer()
        // Recovery without a restart of either broker: their pools reconnect by themselves.
        try await awaitHealth(200)
        try setPhase("after")
        try await awaitRotations(40)
        try setPhase("stop")

        var finalTokens: [String] = []
        var errors = 0
        for run in runs {
            let output = try await run.value
            #expect(output.status == 0, "wrk: \(output.stderr)")
            #expect(
                !output.stdout.contains("Socket errors"), "no connection was dropped or timed out: \(output.stdout)")
            let lines = output.stdout.split(separator: "\n").filter { $0.hasPrefix("thread ") }
            #expect(lines.count == 2, "\(output.stdout)")
            for line in lines {
                var fields: [String: String] = [:]
                for field in line.split(separator: " ") {
                    let parts = field.split(separator: "=", maxSplits: 1)
                    if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
                }
                #expect(fields["other"] == "0", "only 200 and 503 were answered: \(line)")
                #expect(fields["unexpected"] == "0", "503 only while the database was down: \(line)")
                #expect(Int(fields["ok"] ?? "") ?? 0 > 0)
                errors += Int(fields["s503"] ?? "") ?? 0
                finalTokens.append(fields["token"] ?? "")
            }
        }
        #expect(errors > 0, "the outage was answered 503")

        // The store's invariants: no session was revoked (no rotation was lost and then seen as a replay), and
        // every session has exactly one live refresh token.
        // Both tables over one connection, as they stand once the load has stopped.
        let (sessions, refreshTokens) = try await PostgresReader.with(shared.url) { store in
            (try await StoreTables.rows(store, "sessions"), try await StoreTables.rows(store, "refresh_tokens"))
        }
        #expect(!sessions.isEmpty)
        #expect(sessions.filter { $0["revoked_at"] != .null }.isEmpty, "no session was revoked")
        var live: [StoreValue: Int] = [:]
        for token in refreshTokens where token["used_at"] == .null {
            live[token["session_id"] ?? .null, default: 0] += 1
        }
        let uneven = sessions.filter { live[$0["id"] ?? .null] != 1 }
        #expect(uneven.isEmpty, "each session has one live refresh token: \(uneven)")
        // No answer that said 200 was lost: the last token each chain received is the live one and rotates.
        for (index, token) in finalTokens.enumerated() {
            let server = index % 2 == 0 ? a : b
            let next = try await server.form(
                "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", token)])
            #expect(next.status == 200, "chain \(index): \(String(describing: next.json))")
        }
        #expect(a.process.isRunning, "broker a did not exit: \(Self.lastWords(a.stderr))")
        #expect(b.process.isRunning, "broker b did not exit: \(Self.lastWords(b.stderr))")
    }

    /// What a broker's stderr says about its end: from a crash report's first line (Swift's backtracer writes
    /// the reason there and then every thread), else its last lines.
    static func lastWords(_ stderr: String) -> String {
        for marker in ["Fatal error", "💣", "Program crashed"] {
            if let start = stderr.range(of: marker)?.lowerBound {
                return "its stderr from the crash: " + String(stderr[start...].prefix(6000))
            }
        }
        return "its stderr ends: " + String(stderr.suffix(4000))
    }
}
