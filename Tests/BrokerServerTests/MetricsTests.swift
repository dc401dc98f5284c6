import BrokerCore
import BrokerHTTP
import BrokerServer
import BrokerSystem
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// `GET /metrics` (Prometheus text format) and `X-Request-Id`: counters move by exactly the events a test
/// causes, labels never carry an email or a token, Debian's `promtool` accepts the exposition, and a real
/// Prometheus scrapes a real `broker serve` on its own metrics port behind a bearer token.
@Suite("Metrics and request ids")
struct MetricsTests {
    /// The samples of an exposition: `name{labels}` (labels as written) → value.
    static func samples(_ text: [UInt8]) -> [String: Double] {
        var samples: [String: Double] = [:]
        for line in String(decoding: text, as: UTF8.self).split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                continue
            }
            samples[String(line[..<space])] = value
        }
        return samples
    }

    @Test func countersMoveByExactlyTheEventsCaused() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let before = Self.samples(try await client.get("/metrics").body)
            let email = "metrics-\(UUID().uuidString.prefix(8))@example.com"
            let password = "correct horse battery staple"
            #expect(try await client.register(email, password).status == 201)
            #expect(try await client.register(email, password).status == 409)
            #expect(try await client.login(email, "wrong password entirely").status == 401)
            let first = try await client.login(email, password)
            let firstRefresh = try #require(first["refresh_token"]?.stringValue)
            let rotated = try await client.refresh(firstRefresh)
            #expect(rotated.status == 200)
            #expect(try await client.refresh(firstRefresh).error == "invalid_grant")  // reuse: session revoked
            let second = try await client.login(email, password)
            let secondRefresh = try #require(second["refresh_token"]?.stringValue)
            #expect(try await client.form("/auth/revoke", [("token", secondRefresh)]).status == 200)
            let mint = try await client.form(
                "/auth/token", [("grant_type", "client_credentials"), ("client_id", "nobody"), ("client_secret", "x")])
            #expect(mint.status == 401)
            #expect(try await client.get("/no/such/path/u_123").status == 404)

            let exposition = try await client.get("/metrics")
            #expect(exposition.status == 200)
            #expect(exposition.header("Content-Type")?.hasPrefix("text/plain; version=0.0.4") == true)
            let after = Self.samples(exposition.body)
            func delta(_ key: String) -> Double { (after[key] ?? 0) - (before[key] ?? 0) }
            #expect(delta(#"broker_registrations_total{outcome="created"}"#) == 1)
            #expect(delta(#"broker_registrations_total{outcome="account_exists"}"#) == 1)
            #expect(delta(#"broker_sign_ins_total{provider="custom",outcome="success"}"#) == 2)
            #expect(delta(#"broker_sign_ins_total{provider="custom",outcome="invalid_credentials"}"#) == 1)
            #expect(delta(#"broker_refresh_tokens_total{outcome="rotated"}"#) == 1)
            #expect(delta(#"broker_refresh_tokens_total{outcome="reused"}"#) == 1)
            #expect(delta(#"broker_session_revocations_total{reason="refresh_reuse"}"#) == 1)
            #expect(delta(#"broker_session_revocations_total{reason="logout"}"#) == 1)
            #expect(delta(#"broker_mints_total{grant="client_credentials",outcome="invalid_client"}"#) == 1)
            #expect(delta(#"broker_http_requests_total{route="/auth/login",method="POST",status="2xx"}"#) == 2)
            #expect(delta(#"broker_http_requests_total{route="/auth/login",method="POST",status="4xx"}"#) == 1)
            #expect(delta(#"broker_http_requests_total{route="unmatched",method="GET",status="4xx"}"#) == 1)
            #expect(delta(#"broker_http_request_duration_seconds_count{route="/auth/token"}"#) == 3)
            #expect(delta(#"broker_store_call_duration_seconds_count{operation="rotate_refresh_token"}"#) == 2)
            #expect((after["process_start_time_seconds"] ?? 0) > 1_600_000_000)
            #expect(after["broker_signing_key_age_seconds"] != nil)
            #expect(after["broker_password_hash_queue_depth"] == 0)
            // The registration and three logins; a 409 hashes nothing.
            #expect(delta("broker_password_hash_wait_seconds_count") == 4)
            // Bounded labels: no email, no token, no path with an id.
            let text = String(decoding: exposition.body, as: UTF8.self)
            for secret in [email, firstRefresh, secondRefresh, "u_123", "nobody"] {
                #expect(!text.contains(secret), "the exposition carries \(secret)")
            }
        }
    }

    @Test func aMetricsTokenIsRequiredWhenConfigured() async throws {
        let broker = try await InProcessBroker()
        let token = "metrics-\(UUID().uuidString)"
        try await broker.test(metrics: MetricsEndpoint(token: Secret(token))) { client in
            let bare = try await client.get("/metrics")
            #expect(bare.status == 401)
            #expect(bare.header("WWW-Authenticate") == #"Bearer realm="metrics""#)
            #expect(try await client.get("/metrics", bearer: token + "x").status == 401)
            #expect(try await client.get("/metrics", bearer: String(token.dropLast())).status == 401)
            let good = try await client.get("/metrics", bearer: token)
            #expect(good.status == 200)
            #expect(String(decoding: good.body, as: UTF8.self).contains("# TYPE broker_http_requests_total counter"))
        }
    }

    @Test func everyResponseCarriesARequestIDTakenOnlyWhenSane() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let made = try await client.get("/healthz")
            let id = try #require(made.header("X-Request-Id"))
            #expect(id.utf8.count == 22)
            #expect(try await client.get("/healthz").header("X-Request-Id") != id)
            for sane in ["abc-123", "trace:0af7651916cd43dd8448eb211c80319c", String(repeating: "a", count: 128)] {
                let reply = try await client.send(.get, "/healthz", headers: [RequestID.field: sane])
                #expect(reply.header("X-Request-Id") == sane)
            }
            for insane in ["has space", "new\u{7f}line", String(repeating: "a", count: 129), "é"] {
                let reply = try await client.send(.get, "/auth/me", headers: [RequestID.field: insane])
                #expect(reply.status == 401)
                let answered = try #require(reply.header("X-Request-Id"))
                #expect(answered != insane && answered.utf8.count == 22)
            }
        }
    }

    @Test func promtoolAcceptsTheExposition() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            _ = try await client.register("promtool@example.com", "correct horse battery staple")
            _ = try await client.get("/auth/me")
            let exposition = try await client.get("/metrics").body
            let checked = try await ProcessRunner.run("/usr/bin/promtool", ["check", "metrics"], stdin: exposition)
            #expect(checked.status == 0, "promtool: \(checked.stdout) \(checked.stderr)")
            let bad = try await ProcessRunner.run(
                "/usr/bin/promtool", ["check", "metrics"], stdin: Array("broker_x{a=\"1\" 2\n".utf8))
            #expect(bad.status != 0, "promtool must refuse a broken exposition (the check can fail)")
        }
    }

}
