import BrokerCore
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// The CLI against two APIs with different audiences and a git server (issue "Tokens for every door"): the
/// resource server (Tests/Interop/resource_server.py) makes `/api/one`, `/api/two` and `/git` three APIs of their
/// own, each refusing any token whose `aud` is not its URL. `/api/one` is DPoP (its `api_urls` entry names its
/// resource and `"dpop": true`); `/api/two` is Bearer, named nowhere in the client's config: its 401 points at its
/// RFC 9728 metadata, which names the broker; git's server is a bearer-only resource, so its token is unbound and
/// short-lived.
@Suite("tokens per API: two APIs and a git server, each with a token of its own")
struct TokensPerAPITests {
    /// The claims of the token an `Authorization` header carried (`Bearer`, `DPoP`, or `Basic` with the token as
    /// the password, as git sends it).
    static func claims(_ authorization: String?) -> JSONValue? {
        guard let authorization, var token = authorization.split(separator: " ").last.map(String.init) else {
            return nil
        }
        if authorization.hasPrefix("Basic "), let decoded = Data(base64Encoded: token) {
            token = String(decoding: decoded, as: UTF8.self).split(separator: ":").last.map(String.init) ?? ""
        }
        return jwtParts(token).claims
    }

    static func aud(_ authorization: String?) -> String? { claims(authorization)?["aud"]?.stringValue }

    static func bound(_ authorization: String?) -> Bool { claims(authorization)?["cnf"] != nil }

    @Test func eachAPIAndTheGitServerReceiveATokenForItself() async throws {
        let served = try await ServedRepository.make()
        let root = served.root
        let gitRoot = served.gitRoot
        let git = served.git
        let links = try HelperLinks()

        let protected = ["/api/one={base}/api/one", "/api/two={base}/api/two", "/git={base}/git"]
        try await RequestWorld.run(gitRoot: gitRoot, protected: protected) { world in
            let base = world.api.base
            let now = world.broker.clock.seconds()
            try await world.broker.store.createResource(ResourceRecord(url: base + "/api/one", createdAt: now))
            try await world.broker.store.createResource(
                ResourceRecord(url: base + "/api/two", createdAt: now, bearer: true))
            try await world.broker.store.createResource(
                ResourceRecord(url: base + "/git", createdAt: now, bearer: true))
            try await world.client.register("per-api@example.com")
            try world.writeConfig(
                #"""
                {"api_urls": [{"url": "\#(base)/api/one", "dpop": true, "resource": "\#(base)/api/one"},
                              "\#(base)/api/two", {"url": "\#(base)/git", "resource": "\#(base)/git"}]}
                """#)

            let one = try await world.request([base + "/api/one/items", "--fail"])
            #expect(one.status == 0, "\(one.stderr)")
            let two = try await world.request([base + "/api/two/items", "--fail"])
            #expect(two.status == 0, "\(two.stderr)")
            let environment = world.client.environment.merging(["PATH": links.path]) { $1 }
            let clone = root.appendingPathComponent("clone").path
            let cloned = try await git(
                [
                    "-c", "credential.\(base).helper=broker", "-c", "credential.useHttpPath=true", "clone", "-q",
                    base + "/git/repo.git", clone,
                ], environment)
            #expect(cloned.status == 0, "\(cloned.stderr)")
            #expect(!cloned.stderr.contains("DPoP-bound"), "a bearer-only resource's token is unbound: no warning")

            let log = try await world.api.log()
            let servedOne = log.filter { $0.path.hasPrefix("/api/one") && $0.status == 200 }
            #expect(servedOne.count == 1)
            #expect(servedOne.allSatisfy { $0.authorization?.hasPrefix("DPoP ") == true })
            #expect(servedOne.allSatisfy { Self.aud($0.authorization) == base + "/api/one" })
            let atTwo = log.filter { $0.path.hasPrefix("/api/two") }
            #expect(atTwo.map(\.status) == [401, 200], "the session's token refused, then the one for /api/two")
            #expect(Self.aud(atTwo.first?.authorization) == "broker")
            #expect(Self.aud(atTwo.last?.authorization) == base + "/api/two")
            #expect(atTwo.last?.authorization?.hasPrefix("Bearer ") == true && !Self.bound(atTwo.last?.authorization))
            let atGit = log.filter { $0.path.hasPrefix("/git/") && $0.status == 200 }
            #expect(!atGit.isEmpty)
            #expect(atGit.allSatisfy { Self.aud($0.authorization) == base + "/git" && !Self.bound($0.authorization) })

            // Each API's token is kept: asking again costs no grant; the session's own token is untouched.
            let grants = try await world.refreshes()
            let again = try await world.request([base + "/api/one/more", "--fail"])
            #expect(again.status == 0, "\(again.stderr)")
            let printed = try await world.client.run(["token", "--resource", base + "/git"])
            #expect(printed.status == 0, "\(printed.stderr)")
            #expect(jwtParts(printed.stdout.trimmingCharacters(in: .whitespacesAndNewlines)).claims?["exp"] != nil)
            #expect(try await world.refreshes() == grants, "the cached tokens answered")
            let session = try #require(try world.client.cached())
            #expect(Self.aud("Bearer " + session.accessToken.exposed) == "broker")
            #expect(
                Set(session.resourceTokens.map(\.resource)) == [base + "/api/one", base + "/api/two", base + "/git"])

            // A resource the broker never registered: its refusal, said.
            let unknown = try await world.client.run(["token", "--resource", base + "/api/three"])
            #expect(unknown.status == 1 && unknown.stderr.contains("invalid_target"), "\(unknown.stderr)")
        }
    }
}
