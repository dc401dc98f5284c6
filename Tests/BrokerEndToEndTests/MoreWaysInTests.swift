import BrokerCore
import BrokerHTTP
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// GitHub, Sign in with Apple and a provider of `"type": "oidc"` (`corp`), each through the real broker and
/// `broker emulate`, with the loopback flow a CLI runs (Tests/Interop/browser_flow.py, which plays Apple's
/// form_post page as a browser runs it).
@Suite("more ways in: GitHub, Apple and any OpenID Connect issuer, through their emulators")
struct MoreWaysInTests {
    @Test func eachNewProviderSignsInAndIsListed() async throws {
        let emulator = try await EmulatorProcess.start()
        let server = try await BrokerProcess.start(config: emulator.brokerConfig)
        defer { server.stop() }

        let listed = try await server.get("/auth/providers")
        let entries = listed["providers"]?.arrayValue ?? []
        let names = Dictionary(
            uniqueKeysWithValues: entries.compactMap { entry in
                entry["id"]?.stringValue.map { ($0, entry["name"]?.stringValue ?? "") }
            })
        #expect(names["github"] == "GitHub" && names["apple"] == "Apple", "\(names)")
        #expect(names["corp"] == "Example Corp", "a provider of a type under its display name: \(names)")
        let order = entries.compactMap { $0["id"]?.stringValue }
        #expect(order.firstIndex(of: "apple").map { $0 < order.firstIndex(of: "corp") ?? 0 } == true, "\(order)")

        // GitHub: the numeric id is the subject; the verified primary address is kept, an unverified one not.
        let octocat = try await browserFlow(server, provider: "github", account: "octocat")
        let octocatSession = try #require(octocat["session"], "\(octocat)")
        #expect(octocatSession["user_id"]?.stringValue == "github:583231")
        let octocatMe = try await server.me(try #require(octocatSession["access_token"]?.stringValue))
        #expect(octocatMe["email"]?.stringValue == "octocat@github.example")
        #expect(octocatMe["name"]?.stringValue == "The Octocat")
        let bob = try await browserFlow(server, provider: "github", account: "bob")
        let bobMe = try await server.me(try #require(bob["session"]?["access_token"]?.stringValue))
        #expect(bobMe["user_id"]?.stringValue == "github:1000002")
        #expect(bobMe["email"] == nil, "GitHub says bob's primary address is not verified")

        // Apple: the answer is a form post, relayed; the name comes once, on the first sign-in, and is kept.
        let ada = try await browserFlow(server, provider: "apple", account: "ada")
        let adaSession = try #require(ada["session"], "\(ada)")
        #expect(adaSession["user_id"]?.stringValue == "apple:001234.5f3c0b5e9a8d4c2e8f1a6b7c9d0e1f2a.1234")
        let adaMe = try await server.me(try #require(adaSession["access_token"]?.stringValue))
        #expect(adaMe["name"]?.stringValue == "Ada Lovelace" && adaMe["email"]?.stringValue == "ada@example.com")
        let adaAgain = try await browserFlow(server, provider: "apple", account: "ada")
        let adaAgainMe = try await server.me(try #require(adaAgain["session"]?["access_token"]?.stringValue))
        #expect(adaAgainMe["user_id"] == adaMe["user_id"])
        #expect(adaAgainMe["name"]?.stringValue == "Ada Lovelace", "the second sign-in sends no name; it is kept")
        // A private-relay address is a real, verified address.
        let relay = try await browserFlow(server, provider: "apple", account: "relay")
        let relayMe = try await server.me(try #require(relay["session"]?["access_token"]?.stringValue))
        #expect(relayMe["email"]?.stringValue == "x7k2m9q4p1@privaterelay.appleid.com")

        // corp (type oidc): the ID token carries only the subject; the address and name come from userinfo.
        let alice = try await browserFlow(server, provider: "corp", account: "alice")
        let aliceSession = try #require(alice["session"], "\(alice)")
        #expect(aliceSession["user_id"]?.stringValue == "corp:u-7f3a9c21")
        let aliceMe = try await server.me(try #require(aliceSession["access_token"]?.stringValue))
        #expect(aliceMe["email"]?.stringValue == "alice@corp.example" && aliceMe["name"]?.stringValue == "Alice Corp")
        // allowed_domains: an address elsewhere (and unverified) is refused, and nobody is created.
        let mallory = try await browserFlow(server, provider: "corp", account: "mallory")
        #expect(mallory["loopback"]?["error"]?.stringValue == "access_denied", "\(mallory)")
        #expect(mallory["loopback"]?["error_description"]?.stringValue?.contains("corp.example") == true)
        #expect(mallory["session"] == nil)
        let users = try await CLI.run(["users", "list", "--json", "--data-dir", server.dataDirectory])
        #expect(users.status == 0 && users.stdout.contains("u-7f3a9c21"), "\(users.stderr)")
        #expect(!users.stdout.contains("u-0bad0bad"), "nothing written for a refused sign-in")
    }

    @Test func appleFormPostIsRelayedOnlyForAppleAndOnlyOnce() async throws {
        let emulator = try await EmulatorProcess.start()
        let server = try await BrokerProcess.start(config: emulator.brokerConfig)
        defer { server.stop() }
        // A provider that redirects has no form-post callback.
        let google = try await server.form("/auth/google/callback", [("code", "x"), ("state", "y")])
        #expect(google.status == 405, "\(google.status)")
        // Apple's: whatever is posted becomes a sealed relay to the GET, where the state is checked as ever.
        let posted = try await server.form(
            "/auth/apple/callback", [("code", "x"), ("state", "forged"), ("extra", "z")])
        #expect(posted.status == 303)
        let location = try #require(posted.header("Location"))
        #expect(location.hasPrefix(server.url + "/auth/apple/callback?relay="))
        #expect(!location.contains("forged") && !location.contains("extra"), "nothing readable in the URL")
        let followed = try await server.send(HTTPClientRequest(url: location))
        #expect(followed.status == 400, "a forged state is refused after the relay")
        // A relay is the provider's own: opened under another provider's callback it is not one.
        let elsewhere = try await server.send(
            HTTPClientRequest(url: location.replacingOccurrences(of: "/auth/apple/", with: "/auth/github/")))
        #expect(elsewhere.status == 400)
        #expect(
            elsewhere["error_description"]?.stringValue?.contains("relayed") == true,
            "\(String(describing: elsewhere.json))")
        let tampered = try await server.send(HTTPClientRequest(url: String(location.dropLast(3)) + "AAA"))
        #expect(tampered.status == 400)
        // An oversized field is refused before anything is sealed.
        let huge = try await server.form(
            "/auth/apple/callback", [("code", String(repeating: "c", count: 9000)), ("state", "s")])
        #expect(huge.status == 400)
    }

    /// The ID token checks of a provider of type oidc, each delivered through the whole CLI flow: the CLI exits
    /// 1 with why, nothing is cached.
    @Test(arguments: [
        ("issuer", "unexpected issuer"), ("audience", "audience"), ("nonce", "nonce"), ("expired", "expired"),
        ("resigned", "signature"), ("unknown-kid", "kid"), ("signature", "signature"),
    ])
    func badIDTokensOfAnOIDCProviderFail(fault: String, reason: String) async throws {
        let emulator = try await EmulatorProcess.start()
        let server = try await BrokerProcess.start(config: emulator.brokerConfig)
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let (result, page) = try await CLIBrowserLoginTests.login(
            server, client, provider: "corp", browser: ["BROWSER_FAULT": fault])
        #expect(result.status == 1, "\(fault): \(result.stderr)")
        #expect(result.stderr.contains(reason), "\(fault): \(result.stderr)")
        #expect(page?["page_status"]?.intValue == 400)
        #expect(try client.cached() == nil)
    }

    /// The issuer rolls its key: the next sign-in is signed under a kid the broker has not seen, which makes it
    /// fetch the keys again, and the sign-in succeeds.
    @Test func aRotatedKeyIsPickedUp() async throws {
        let emulator = try await EmulatorProcess.start()
        let server = try await BrokerProcess.start(config: emulator.brokerConfig)
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let (first, _) = try await CLIBrowserLoginTests.login(server, client, provider: "corp")
        #expect(first.status == 0, "\(first.stderr)")
        let rotated = try await HTTPClient.shared.send(
            HTTPClientRequest(method: "POST", url: emulator.url + "/oidc/rotate", body: []))
        #expect(rotated.status == 200)
        let keys = try await HTTPClient.shared.send(HTTPClientRequest(url: emulator.url + "/oidc/keys"))
        #expect(JSONValue.parse(keys.body)?["keys"]?.arrayValue?.count == 2, "the new key beside the old")
        let (second, _) = try await CLIBrowserLoginTests.login(server, client, provider: "corp")
        #expect(second.status == 0, "\(second.stderr)")
        #expect(try client.cached()?.userID.description == "corp:u-7f3a9c21")
    }
}
