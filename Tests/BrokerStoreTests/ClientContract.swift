import BrokerCore
import BrokerStore
import Testing

/// The store contract for CI clients and the token-exchange replay cache: written against the ``Store`` protocol alone, run against each store
/// in ``StoreUnderTest``.
@Suite("Store contract: CI clients and the token-exchange replay cache")
struct ClientContract {
    @Test(arguments: StoreUnderTest.available)
    func clientsAreCreatedListedFoundAndDeleted(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let trusted = ClientRecord(
            name: "deploy", secretHash: "hmac-1", scopes: ["deploy", "read"],
            trust: TrustPolicy(
                issuer: "https://token.actions.example", subjectPattern: "repo:org/app:*", audience: "broker",
                maxAge: 300),
            createdAt: Make.now)
        let plain = ClientRecord(
            name: "backup", secretHash: "hmac-2", scopes: ["read"], trust: nil, createdAt: Make.now)
        try await store.createClient(trusted)
        try await store.createClient(plain)
        #expect(try await store.client(name: "deploy") == trusted)
        #expect(try await store.client(name: "backup") == plain)
        #expect(try await store.client(name: "nope") == nil)
        #expect(try await store.clients() == [plain, trusted], "by name")
        await #expect {
            try await store.createClient(
                ClientRecord(name: "deploy", secretHash: "x", scopes: [], trust: nil, createdAt: Make.now))
        } throws: { error in
            (error as? StoreError)?.code == .conflict
        }
        #expect(try await store.client(name: "deploy") == trusted, "the conflict changed nothing")
        #expect(try await store.deleteClient(name: "deploy"))
        #expect(try await !store.deleteClient(name: "deploy"))
        #expect(try await store.client(name: "deploy") == nil)
        #expect(try await store.clients() == [plain])
    }

    @Test(arguments: StoreUnderTest.available)
    func exchangedTokenIsRecordedOncePerIssuer(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        #expect(try await store.recordExchange(issuer: "https://a", jti: "j1", expiresAt: Make.now + 60))
        #expect(try await !store.recordExchange(issuer: "https://a", jti: "j1", expiresAt: Make.now + 60))
        #expect(try await store.recordExchange(issuer: "https://b", jti: "j1", expiresAt: Make.now + 60))
        let wins = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<30 {
                group.addTask {
                    try await store.recordExchange(issuer: "https://a", jti: "j2", expiresAt: Make.now + 60)
                }
            }
            return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
        }
        #expect(wins == 1)
    }
}
