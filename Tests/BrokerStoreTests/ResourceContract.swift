import BrokerCore
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
        let mcp = ResourceRecord(url: "https://agents.example/mcp", createdAt: 6)
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
}
