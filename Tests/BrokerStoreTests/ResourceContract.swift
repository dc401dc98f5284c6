import BrokerCore
import BrokerCrypto
import BrokerStore
import Testing

/// The store contract for resources (RFC 8707, schema v18): written against the ``Store`` protocol alone, run
/// against each store in ``StoreUnderTest``.
@Suite("Store contract: resources")
struct ResourceContract {
    @Test(arguments: StoreUnderTest.available)
    func aResourceIsRegisteredOnceListedAndRemoved(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        #expect(try await store.resources().isEmpty)
        let files = ResourceRecord(
            url: "https://files.example/api", scopes: ["files:read", "files:write"], createdAt: 5)
        let mcp = ResourceRecord(url: "https://agents.example/mcp", createdAt: 6, bearer: true)
        try await store.createResource(files)
        try await store.createResource(mcp)
        await #expect(throws: StoreError.self, "the same URL twice") {
            try await store.createResource(ResourceRecord(url: files.url, createdAt: 7))
        }
        #expect(try await store.resource(url: files.url) == files, "the first registration stands")
        #expect(try await store.resource(url: "https://files.example/api/") == nil, "matched exactly")
        #expect(try await store.resources() == [mcp, files], "by URL")
        #expect(try await store.deleteResource(url: mcp.url))
        #expect(try await !store.deleteResource(url: mcp.url))
        #expect(try await store.resources() == [files])
    }

    /// Initial access tokens (schema v19): each spends once, on any broker, before it expires; unknown is no.
    @Test(arguments: StoreUnderTest.available)
    func anInitialAccessTokenIsSpentOnceBeforeItExpires(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let hash = Digest.sha256("initial")
        try await store.createRegistrationToken(hash: hash, RegistrationTokenRecord(createdAt: 10, expiresAt: 100))
        #expect(try await !store.spendRegistrationToken(hash: Digest.sha256("other"), now: 20))
        #expect(try await !store.spendRegistrationToken(hash: hash, now: 100), "expired at its expiry")
        #expect(try await store.spendRegistrationToken(hash: hash, now: 99))
        #expect(try await !store.spendRegistrationToken(hash: hash, now: 99), "once")
    }

    /// An app that registered itself keeps how and under which name; the operator's apps have no registration.
    @Test(arguments: StoreUnderTest.available)
    func aRegisteredAppKeepsItsRegistration(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let registered = AppRecord(
            clientID: "reg-1", secretHash: nil, redirectURIs: ["http://127.0.0.1/cb"], createdAt: 3,
            registration: AppRecord.Registration(mode: "open", clientName: "Agent"))
        let unnamed = AppRecord(
            clientID: "reg-2", secretHash: "h", redirectURIs: ["https://a.example/cb"], createdAt: 4,
            registration: AppRecord.Registration(mode: "token", clientName: nil))
        let operators = AppRecord(
            clientID: "web", secretHash: "h", redirectURIs: ["https://w.example/cb"], createdAt: 5)
        for app in [registered, unnamed, operators] { try await store.createApp(app) }
        #expect(try await store.apps() == [registered, unnamed, operators])
    }
}
