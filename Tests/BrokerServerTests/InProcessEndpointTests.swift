import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// Endpoint logic in the test process (``InProcessBroker``): errors, grants, rotation, revocation, throttling
/// and expiry — time windows crossed by advancing the manual clock, never by sleeping.
@Suite("broker endpoints in process")
struct InProcessEndpointTests {
    static let password = "correct horse battery staple"

    @Test func malformedRequestsGetTheContractsErrors() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let missing = try await client.get("/no/such/endpoint")
            #expect(missing.status == 404 && missing.error == "not_found")
            let badJSON = try await client.send(
                .post, "/auth/login", headers: [.contentType: "application/json"], body: Array("{\"email\":".utf8))
            #expect(badJSON.status == 400 && badJSON.error == "invalid_request")
            let repeated = try await client.get("/auth/google/start?state=a&state=b")
            #expect(repeated.status == 400 && repeated.error == "invalid_request")
            let grant = try await client.form("/auth/token", [("grant_type", "password")])
            #expect(grant.status == 400 && grant.error == "unsupported_grant_type")
            let noGrant = try await client.form("/auth/token", [])
            #expect(noGrant.status == 400 && noGrant.error == "invalid_request")
            let big = try await client.send(
                .post, "/auth/register", headers: [.contentType: "application/json"],
                body: Array(repeating: UInt8(ascii: " "), count: RequestInput.maxBodySize + 1))
            #expect(big.status == 413)
            let me = try await client.get("/auth/me", bearer: "not.a.token")
            #expect(me.status == 401 && me.error == "invalid_token")
        }
        #expect(try await broker.store.passwordAccount(email: "a@example.com") == nil, "nothing was written")
    }

    @Test func aPasswordSignInReadsItsAccountOnce() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let registered = try await client.register("once@example.com", Self.password)
            #expect(registered.status == 201)
            let claims = jwtParts(try #require(registered["access_token"]?.stringValue)).claims
            #expect(claims?["email_verified"] == false, "a new account's address is not confirmed")
            let before = Self.storeCalls(broker, "password_account")
            let login = try await client.login("once@example.com", Self.password)
            #expect(login.status == 200)
            #expect(jwtParts(try #require(login["access_token"]?.stringValue)).claims?["email_verified"] == false)
            // The check's read serves the session too (the verification claim comes from the same row).
            #expect(Self.storeCalls(broker, "password_account") - before == 1)
        }
    }

    /// How many store calls of `operation` the broker's metrics have counted.
    static func storeCalls(_ broker: InProcessBroker, _ operation: String) -> Int {
        let prefix = "broker_store_call_duration_seconds_count{operation=\"\(operation)\"} "
        let line = broker.service.metrics.text().split(separator: "\n").first { $0.hasPrefix(prefix) }
        return line.flatMap { Int($0.dropFirst(prefix.count)) } ?? 0
    }

    @Test func tokensExpireOnTheClock() async throws {
        let broker = try await InProcessBroker(
            config: #"{"server": {"access_token_ttl": 300, "refresh_token_ttl": 600}}"#)
        try await broker.test { client in
            let session = try await client.register("clock@example.com", Self.password)
            let access = try #require(session["access_token"]?.stringValue)
            let refresh = try #require(session["refresh_token"]?.stringValue)
            broker.clock.advance(by: 299)
            #expect(try await client.get("/auth/me", bearer: access).status == 200)
            // The verifier's leeway (60 s) is part of the rule: the token is refused once it has passed.
            broker.clock.advance(by: 62)
            #expect(try await client.get("/auth/me", bearer: access).status == 401)
            broker.clock.advance(by: 600 - 361)
            let expired = try await client.refresh(refresh)
            #expect(expired.error == "invalid_grant")
            #expect(expired["error_description"]?.stringValue?.contains("expired") == true)
        }
    }

    @Test func failedLoginsBackOffExactlyAsTheRuleSays() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            #expect(try await client.register("victim@example.com", Self.password).status == 201)
            for attempt in 1...5 {
                let reply = try await client.login("victim@example.com", "wrong password \(attempt)")
                #expect(reply.status == 401 && reply.error == "invalid_credentials")
            }
            #expect(try await client.login("victim@example.com", "wrong password 6").status == 401)
            let blocked = try await client.login("victim@example.com", Self.password)
            #expect(blocked.status == 429 && blocked.error == "too_many_requests")
            #expect(blocked.header("Retry-After") == "1", "the first block is one second")
            broker.clock.advance(by: 0.5)
            #expect(try await client.login("victim@example.com", Self.password).status == 429)
            broker.clock.advance(by: 0.5)
            // The next failure doubles the block.
            #expect(try await client.login("victim@example.com", "wrong again").status == 401)
            #expect(try await client.login("victim@example.com", Self.password).header("Retry-After") == "2")
            broker.clock.advance(by: 2)
            #expect(try await client.login("victim@example.com", Self.password).status == 200)
        }
    }

    @Test(
        "a removed client's tokens do not come back with a new client of the same name",
        .bug(id: 18, "finding 9: tokens issued before a client's creation were accepted"))
    func tokensOfARemovedClientStayDead() async throws {
        let broker = try await InProcessBroker()
        let secret = try ClientSecretHasher.newSecret()
        @Sendable func add() async throws {
            try await broker.store.createClient(
                ClientRecord(
                    name: "deploy", secretHash: broker.service.clients.clientSecrets.hash(secret), scopes: ["deploy"],
                    trust: nil, createdAt: broker.clock.seconds()))
        }
        try await add()
        try await broker.test { client in
            let minted = try await client.form(
                "/auth/token",
                [("grant_type", "client_credentials"), ("client_id", "deploy"), ("client_secret", secret.exposed)])
            let token = try #require(minted["access_token"]?.stringValue)
            #expect(try await client.get("/auth/me", bearer: token).status == 200)
            #expect(try await broker.store.deleteClient(name: "deploy"))
            #expect(try await client.get("/auth/me", bearer: token).status == 401)
            broker.clock.advance(by: 1)
            try await add()
            let reply = try await client.get("/auth/me", bearer: token)
            #expect(reply.status == 401)
            #expect(reply["error_description"]?.stringValue?.contains("before its client") == true)
            let fresh = try await client.form(
                "/auth/token",
                [("grant_type", "client_credentials"), ("client_id", "deploy"), ("client_secret", secret.exposed)])
            #expect(
                try await client.get("/auth/me", bearer: try #require(fresh["access_token"]?.stringValue)).status == 200
            )
        }
    }
}
