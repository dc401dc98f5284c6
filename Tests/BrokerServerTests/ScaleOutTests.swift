import BrokerCore
import BrokerCrypto
import BrokerPostgres
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Logging
import Testing

/// Two brokers on one PostgreSQL database, each with its own store connection pool, in process: what one
/// writes the other honours (accounts, sessions, reuse detection, the throttle, the browser flow's state,
/// keys). The brokers share a manual clock, as replicas share the wall clock.
@Suite("scale-out: two brokers on one PostgreSQL database")
struct ScaleOutTests {
    static let password = "correct horse battery staple"

    /// Two brokers (A, B) on a fresh database, each through its own ``PostgresStore``.
    static func pair(config: String? = nil) async throws -> (InProcessBroker, InProcessBroker) {
        let url = try await TestPostgres.freshDatabase()
        let master = try SecureRandom.bytes(32)
        let clock = ManualClock()
        let transport = ScriptedTransport()
        var brokers: [InProcessBroker] = []
        for _ in 0..<2 {
            let store = try await openStore(url)
            brokers.append(
                try await InProcessBroker(config: config, clock: clock, transport: transport, shared: (store, master)))
        }
        return (brokers[0], brokers[1])
    }

    static func openStore(_ url: String) async throws -> PostgresStore {
        guard case .postgres(let location) = try DatabaseLocation.parse(url) else {
            throw TestSupportError("not a PostgreSQL URL")
        }
        return try await PostgresStore.open(
            location, password: TestPostgres.password, poolSize: 4, deadline: .seconds(60), logger: Logger.test())
    }

    @Test func registerOnOneSignInOnTheOtherAndReuseRevokesOnBoth() async throws {
        let (a, b) = try await Self.pair()
        try await a.test { onA in
            try await b.test { onB in
                #expect(try await onA.register("ada@example.com", Self.password).status == 201)
                #expect(try await onB.register("ada@example.com", Self.password).status == 409, "one account")
                let session = try await onB.login("ada@example.com", Self.password)
                #expect(session.status == 200)
                let first = try #require(session["refresh_token"]?.stringValue)
                let access = try #require(session["access_token"]?.stringValue)
                #expect(try await onA.get("/auth/me", bearer: access).status == 200, "B's token verifies at A")

                let rotated = try await onA.refresh(first)
                #expect(rotated.status == 200)
                let second = try #require(rotated["refresh_token"]?.stringValue)
                // The spent token replayed at the other broker: reuse, the whole family is revoked.
                let replay = try await onB.refresh(first)
                #expect(replay.status == 400 && replay.error == "invalid_grant")
                #expect(try await onA.refresh(second).error == "invalid_grant", "the successor died with it")
                #expect(try await onA.get("/auth/me", bearer: access).status == 401)
                #expect(try await onB.get("/auth/me", bearer: access).status == 401)
            }
        }
    }

    /// DPoP (RFC 9449): a proof's jti is remembered in the store, so the other broker refuses a replay, and a
    /// session bound at one broker is bound at the other (its refresh token without the key spends nothing).
    @Test func aDPoPProofAcceptedByOneBrokerIsAReplayAtTheOther() async throws {
        let (a, b) = try await Self.pair()
        let key = try AsymmetricKey.generate(.ecP256)
        try await a.test { onA in
            try await b.test { onB in
                _ = try await onA.register("replay@example.com", Self.password)
                let now = a.clock.seconds()
                let signedIn = try await DPoPTests.login(
                    onA, "replay@example.com", proof: try DPoPTests.proof(key, "POST", "/auth/login", at: now))
                let access = try #require(signedIn["access_token"]?.stringValue)
                let refresh = try #require(signedIn["refresh_token"]?.stringValue)
                let proof = try DPoPTests.proof(key, "GET", "/auth/me", token: access, at: now)
                #expect(try await DPoPTests.me(onA, access, proof: proof).status == 200)
                let replay = try await DPoPTests.me(onB, access, proof: proof)
                #expect(replay.status == 401 && replay.error == "invalid_dpop_proof")
                #expect(try await DPoPTests.refresh(onB, refresh, proof: nil).error == "invalid_dpop_proof")
                let rotated = try await DPoPTests.refresh(
                    onB, refresh, proof: try DPoPTests.proof(key, "POST", "/auth/token", at: now))
                #expect(rotated.status == 200)
            }
        }
    }

    @Test func theSameRefreshTokenAtBothBrokersAtOnceRotatesOnce() async throws {
        let (a, b) = try await Self.pair()
        try await a.test { onA in
            try await b.test { onB in
                #expect(try await onA.register("race@example.com", Self.password).status == 201)
                for _ in 0..<10 {
                    let token = try #require(
                        try await onA.login("race@example.com", Self.password)["refresh_token"]?.stringValue)
                    async let fromA = onA.refresh(token)
                    async let fromB = onB.refresh(token)
                    let statuses = [try await fromA.status, try await fromB.status].sorted()
                    #expect(statuses == [200, 400], "exactly one rotation; the other is reuse")
                }
            }
        }
    }

    @Test func wrongPasswordsOnBothBrokersAddUpToOneThrottle() async throws {
        let (a, b) = try await Self.pair()
        try await a.test { onA in
            try await b.test { onB in
                #expect(try await onA.register("victim@example.com", Self.password).status == 201)
                // Five free failures, spread over the brokers; the sixth starts the block, the seventh meets it.
                for attempt in 1...6 {
                    let broker = attempt.isMultiple(of: 2) ? onB : onA
                    #expect(try await broker.login("victim@example.com", "wrong \(attempt)").status == 401)
                }
                let blocked = try await onA.login("victim@example.com", "wrong 7")
                #expect(blocked.status == 429 && blocked.header("Retry-After") == "1")
                #expect(try await onB.login("victim@example.com", "wrong 8").status == 429)
                a.clock.advance(by: 1)
                #expect(try await onB.login("victim@example.com", Self.password).status == 200)
            }
        }
    }

    @Test func wrongDeviceCodesOnBothBrokersAddUpToOneLimit() async throws {
        let (a, b) = try await Self.pair()
        try await a.live { onA, _ in
            try await b.live { onB, _ in
                // Ten wrong codes from one address, alternating between the brokers, spend the one bucket.
                for attempt in 0..<10 {
                    let broker = attempt.isMultiple(of: 2) ? onA : onB
                    #expect(try await broker.get("/device?user_code=BCDF-GHJK").status == 400)
                }
                let limited = try await onB.get("/device?user_code=BCDF-GHJK")
                #expect(limited.status == 429 && limited.header("Retry-After") == "60")
                #expect(try await onA.get("/device?user_code=BCDF-GHJK").status == 429)
                a.clock.advance(by: 60)
                #expect(try await onA.get("/device?user_code=BCDF-GHJK").status == 400, "one more a minute")
                #expect(try await onB.get("/device?user_code=BCDF-GHJK").status == 429)
            }
        }
    }

    @Test func aKeyRotatedOnTheStoreIsServedByBothAndTokensVerifyAcross() async throws {
        let (a, b) = try await Self.pair()
        let before = a.service.keys.current.ring.current.kid
        #expect(b.service.keys.current.ring.current.kid == before, "the brokers agreed on one first key")
        guard case .vault(let vault) = a.service.keys.source else {
            Issue.record("the keys come from the store")
            return
        }
        let rotated = try await vault.rotate(kind: .ecP256, now: a.clock.seconds(), retention: 3700)
        // The maintenance tick (once a second in a running broker) picks the change up.
        await a.service.maintain()
        await b.service.maintain()
        for broker in [a, b] {
            #expect(broker.service.keys.current.ring.current.kid == rotated.current.kid)
            // The rotated ring, then the id-token key the first broker made and both share.
            let idTokenKID = try #require(try a.service.keys.current.idTokenKeys.first?.thumbprint())
            #expect(broker.service.keys.current.publishedKIDs == [rotated.current.kid, before, idTokenKID])
        }
        try await a.test { onA in
            try await b.test { onB in
                #expect(try await onA.register("keys@example.com", Self.password).status == 201)
                let fromB = try #require(
                    try await onB.login("keys@example.com", Self.password)["access_token"]?.stringValue)
                #expect(try await onA.get("/auth/me", bearer: fromB).status == 200)
                let jwks = try await onB.get("/.well-known/jwks.json")
                #expect(
                    jwks["keys"]?.arrayValue?.compactMap { $0["kid"]?.stringValue }.prefix(2)
                        == [rotated.current.kid, before])
            }
        }
    }

    @Test func aBrowserSignInStartedOnOneBrokerFinishesOnTheOther() async throws {
        let (a, b) = try await Self.pair(config: InProcessBrowserFlowTests.config)
        let google = try InProcessBrowserFlowTests.ScriptedGoogle(transport: a.transport, clock: a.clock)
        let pkce = try PKCE.generate()
        try await a.test { onA in
            try await b.test { onB in
                let (state, nonce) = try await InProcessBrowserFlowTests.start(onA, pkce: pkce)
                google.answerTokens(subject: "1045", nonce: nonce)
                let back = try await InProcessBrowserFlowTests.callback(onB, state: state)
                let code = try #require(back["code"])
                // The state is spent for both brokers, and the code is redeemed once across them.
                let replay = try await onA.get(
                    "/auth/google/callback?" + FormEncoding.encode([("state", state), ("code", "provider-code")]))
                #expect(replay.status == 400)
                let redeem = [
                    ("grant_type", "authorization_code"), ("code", code), ("code_verifier", pkce.verifier),
                    ("redirect_uri", InProcessBrowserFlowTests.redirect),
                ]
                let session = try await onA.form("/auth/token", redeem)
                #expect(session.status == 200 && session["user_id"]?.stringValue == "google:1045")
                #expect(try await onB.form("/auth/token", redeem).error == "invalid_grant")
            }
        }
    }

    @Test func aCIClientAddedOnTheStoreMintsOnBoth() async throws {
        let (a, b) = try await Self.pair()
        let secret = try ClientSecretHasher.newSecret()
        // Both brokers hash with the one client-secret key sealed in the store.
        #expect(a.service.clients.clientSecrets.hash(secret) == b.service.clients.clientSecrets.hash(secret))
        try await a.store.createClient(
            ClientRecord(
                name: "deploy", secretHash: a.service.clients.clientSecrets.hash(secret), scopes: ["deploy"],
                trust: nil, createdAt: a.clock.seconds() - 10))
        try await a.test { onA in
            try await b.test { onB in
                for broker in [onA, onB] {
                    let minted = try await broker.form(
                        "/auth/token",
                        [
                            ("grant_type", "client_credentials"), ("client_id", "deploy"),
                            ("client_secret", secret.exposed), ("scope", "deploy"),
                        ])
                    #expect(minted.status == 200, "\(String(describing: minted.json))")
                }
            }
        }
    }
}
