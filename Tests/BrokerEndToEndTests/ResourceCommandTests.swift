import BrokerCore
import BrokerCrypto
import BrokerTestSupport
import BrokerTesting
import Testing

/// `broker resource add|list|remove` against a running broker's store, and `broker token --resource` (issue
/// "Tokens for every door", items 1 and 3): each API gets a token whose `aud` is its own, the session's own
/// token stays the broker's audience, and a resource the broker does not know is refused without losing the
/// session.
@Suite("resources: the operator's commands and the CLI's token per API")
struct ResourceCommandTests {
    static let password = "correct horse battery staple"

    @Test func anOperatorRegistersAnAPIAndTheCLIGetsATokenForItAlone() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let store = ["--data-dir", server.dataDirectory]
        let files = "https://files.example/api"

        let bad = try await CLI.run(["resource", "add", "http://files.example/api"] + store)
        #expect(bad.status == 64 && bad.stderr.contains("https"), "\(bad.stderr)")
        let added = try await CLI.run(["resource", "add", files, "--scope", "files:read", "--json"] + store)
        #expect(added.status == 0, "\(added.stderr)")
        #expect(JSONValue.parse(Array(added.stdout.utf8))?["scopes"] == ["files:read"])
        let twice = try await CLI.run(["resource", "add", files] + store)
        #expect(twice.status == 1 && twice.stderr.contains("registered already"), "\(twice.stderr)")
        let listed = try await CLI.run(["resource", "list", "--json"] + store)
        #expect(
            JSONValue.parse(Array(listed.stdout.utf8))?["resources"]?.arrayValue?.first?["resource"] == .string(files))

        let client = try ClientHome(server: server)
        try await client.register("res@example.com", password: Self.password)
        func audience(_ token: String) -> JSONValue? { jwtParts(token).claims?["aud"] }
        let own = try await client.run(["token"])
        #expect(own.status == 0 && audience(own.stdout.filter { !$0.isWhitespace }) == "broker")
        let forFiles = try await client.run(["token", "--resource", files])
        #expect(forFiles.status == 0, "\(forFiles.stderr)")
        #expect(audience(forFiles.stdout.filter { !$0.isWhitespace }) == .string(files))
        // Cached: the launcher answers it alone (broker-full out of reach), the same token; one it has not cached
        // is broker-full's.
        let alone = ["BROKER_FULL": "/nonexistent/broker-full"]
        let warm = try await client.run(["token", "--resource", files], environment: alone)
        #expect(warm.status == 0 && warm.stdout == forFiles.stdout, "\(warm.stderr)")
        let cold = try await client.run(["token", "--resource", "https://other.example/"], environment: alone)
        #expect(cold.status == 1 && cold.stderr.contains("cannot run /nonexistent/broker-full"))
        let unknown = try await client.run(["token", "--resource", "https://unknown.example/"])
        #expect(unknown.status == 1 && unknown.stderr.contains("invalid_target"), "\(unknown.stderr)")
        let malformed = try await client.run(["token", "--resource", "https://files.example/#x"])
        #expect(malformed.status == 64, "\(malformed.stderr)")
        let after = try await client.run(["token", "--resource", files, "--format", "json"])
        #expect(after.status == 0, "the refused resource kept the session: \(after.stderr)")
        #expect(!after.stdout.contains("refresh_token"))
        #expect(audience(try await client.run(["token"]).stdout.filter { !$0.isWhitespace }) == "broker")

        let removed = try await CLI.run(["resource", "remove", files] + store)
        #expect(removed.status == 0, "\(removed.stderr)")
        #expect(try await CLI.run(["resource", "remove", files] + store).status == 1)
        // A token issued for it lives out its minutes (the cached one is still handed out); no new one is issued.
        let kept = try await client.run(["token", "--resource", files])
        #expect(kept.status == 0 && audience(kept.stdout.filter { !$0.isWhitespace }) == .string(files))
        let another = try ClientHome(server: server)
        try await another.register("res2@example.com", password: Self.password)
        let gone = try await another.run(["token", "--resource", files])
        #expect(gone.status == 1 && gone.stderr.contains("invalid_target"), "\(gone.stderr)")
    }
}
