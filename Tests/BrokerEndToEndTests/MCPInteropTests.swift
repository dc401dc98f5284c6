import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// The MCP Python SDK's client and servers with broker as their authorization server (issue "Tokens for every
/// door"): Tests/Interop/mcp_agent.py. The client knows only server A's URL; it discovers broker from A's RFC 9728
/// metadata, registers itself (`server.client_registration: open`), signs the person in through broker's pages
/// with `resource`, and calls A's tool as that person. A's token is refused at B; the person's sign-out cuts the
/// client off.
@Suite("MCP: an agent's client registers itself and gets a token for one MCP server")
struct MCPInteropTests {
    static let password = "correct horse battery staple"

    @Test func theSDKsClientDiscoversRegistersSignsInAndIsCutOffBySignOut() async throws {
        let server = try await BrokerProcess.start(config: #"{"server": {"client_registration": "open"}}"#)
        defer { server.stop() }
        let portA = try freeLoopbackPort()
        let portB = try freeLoopbackPort()
        let resourceA = "http://127.0.0.1:\(portA)/mcp"
        let resourceB = "http://127.0.0.1:\(portB)/mcp"
        for resource in [resourceA, resourceB] {
            let added = try await CLI.run(["resource", "add", resource, "--data-dir", server.dataDirectory])
            #expect(added.status == 0, "\(added.stderr)")
        }
        let checker = try await CLI.run(["client", "add", "mcp-servers", "--json", "--data-dir", server.dataDirectory])
        #expect(checker.status == 0, "\(checker.stderr)")
        let secret = try #require(JSONValue.parse(Array(checker.stdout.utf8))?["client_secret"]?.stringValue)
        let user = try #require(try await server.register("agent-user@example.com", Self.password)["user_id"])

        let result = try await Interop.run(
            [
                "mcp_agent.py", server.url, "agent-user@example.com", Self.password, "\(portA)", "\(portB)",
                "mcp-servers", secret,
            ])
        #expect(result.status == 0, "\(result.stderr)")
        let seen = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout)\n\(result.stderr)")
        #expect(seen["whoami"] == ["server": "A", "sub": user], "A's tool ran as the broker user")
        let clientID = try #require(seen["client_id"]?.stringValue)
        #expect(clientID.hasPrefix("reg-"), "the client registered itself")
        #expect(seen["client_secret"] == .null, "a public client")
        #expect(seen["authorization_resource"] == .string(resourceA), "the SDK sent resource (RFC 8707)")
        #expect(seen["consent_says_registered"] == true)
        #expect(seen["aud"] == .string(resourceA))
        #expect(seen["has_refresh_token"] == true)
        #expect(seen["a_token_at_a"] == 200)
        #expect(seen["a_token_at_b"] == 401, "a token for A is refused by B")
        #expect(seen["b_challenge"]?.stringValue?.contains("resource_metadata=") == true)
        #expect(seen["sign_out"] == 200)
        #expect(seen["after_sign_out"] == "refused", "\(seen["after_sign_out_detail"] ?? .null)")
        #expect(seen["sign_ins_asked"] == 2, "the client was sent back to sign in")
        #expect(seen["refresh_after_sign_out"] == "invalid_grant")

        // The app it registered is an app like the operator's: listed, marked as having registered itself.
        let list = try await CLI.run(["client", "list", "--json", "--data-dir", server.dataDirectory])
        let apps = try #require(JSONValue.parse(Array(list.stdout.utf8))?["clients"]?.arrayValue)
        let registered = try #require(apps.first { $0["client_id"]?.stringValue == clientID })
        #expect(registered["registered"] == ["mode": "open", "client_name": "MCP agent"])
        #expect(registered["kind"] == "public_app")
    }
}

/// Authlib as a second client of registration (RFC 7591 with an initial access token) and of `resource`:
/// Tests/Interop/authlib_registration.py. `broker client registration-token` makes the token as a person would.
@Suite("Registration: Authlib registers an app with an initial access token and asks for one API's token")
struct AuthlibRegistrationTests {
    @Test func anAppRegistersOnceWithItsTokenSignsInForOneAPIAndRefreshesIntoAnother() async throws {
        let server = try await BrokerProcess.start(config: #"{"server": {"client_registration": "token"}}"#)
        defer { server.stop() }
        let one = "https://one.example/api"
        let two = "https://two.example/api"
        for resource in [one, two] {
            let added = try await CLI.run(["resource", "add", resource, "--data-dir", server.dataDirectory])
            #expect(added.status == 0, "\(added.stderr)")
        }
        let minted = try await CLI.run(
            ["client", "registration-token", "--expires-in", "600", "--data-dir", server.dataDirectory])
        #expect(minted.status == 0, "\(minted.stderr)")
        let token = minted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(token.count == 43 && !minted.stderr.contains(token), "the token on stdout only")
        #expect(try await server.register("authlib-app@example.com", MCPInteropTests.password).status == 201)
        let result = try await Interop.run(
            [
                "authlib_registration.py", server.url, token, "authlib-app@example.com", MCPInteropTests.password,
                one, two,
            ])
        #expect(result.status == 0, "\(result.stderr)")
        let seen = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout)")
        #expect(seen["without_token"] == 401)
        #expect(seen["registered"] == 201 && seen["metadata_valid"] == true)
        #expect(seen["token_endpoint_auth_method"] == "client_secret_basic")
        #expect(seen["again"] == 401, "an initial access token registers one app")
        #expect(seen["consent_says_registered"] == true && seen["consent_shows_host"] == true)
        #expect(seen["aud"] == .string(one) && seen["client_id_claim"] == true)
        #expect(seen["refreshed_aud"] == .string(two))
        #expect(seen["unregistered_resource"] == "invalid_target")
        let bad = try await CLI.run(
            ["client", "registration-token", "--expires-in", "5", "--data-dir", server.dataDirectory])
        #expect(bad.status == 64, "\(bad.stderr)")
    }
}

/// Client ID Metadata Documents from a real https host behind a private CA (trustme; Tests/Interop/https_documents.py):
/// trusted through `server.ca_file` and the host listed in `server.client_metadata_hosts` (it is on loopback); not
/// trusted without the CA; refused on loopback when the host is not listed (the address is checked when the
/// broker connects); a redirecting or oversized document refused.
@Suite("Client ID Metadata Documents: a private CA and the address rules, end to end")
struct ClientMetadataDocumentProcessTests {
    static func text(_ reply: BrokerProcess.Reply) -> String { String(decoding: reply.response.body, as: UTF8.self) }

    static func authorize(_ server: BrokerProcess, _ clientID: String) async throws -> BrokerProcess.Reply {
        let query = FormEncoding.encode([
            ("response_type", "code"), ("client_id", clientID), ("redirect_uri", "http://127.0.0.1:7100/callback"),
            ("scope", "openid"), ("state", "s"), ("code_challenge", try PKCE.generate().challenge),
            ("code_challenge_method", "S256"),
        ])
        return try await server.get("/auth/authorize?" + query)
    }

    @Test func aDocumentBehindAPrivateCAIsTrustedThroughCAFileAndOnlyThrough() async throws {
        let directory = try TemporaryDirectory.make(prefix: "broker-documents")
        let caPath = directory.appendingPathComponent("ca.pem").path
        let host = try await offThread {
            try ScriptServer(TestPaths.interop("https_documents.py"), [caPath], prefix: "documents at ")
        }
        defer { host.close() }
        let base = host.ready
        let trusting = try await BrokerProcess.start(
            config: #"{"server": {"client_metadata_hosts": ["localhost"], "ca_file": "\#(caPath)"}}"#)
        defer { trusting.stop() }
        let page = try await Self.authorize(trusting, base + "/client.json")
        #expect(page.status == 200, "\(Self.text(page).prefix(400))")
        #expect(Self.text(page).contains("Sign in"))
        for (path, reason) in [
            ("/redirecting.json", "redirects"), ("/large.json", "larger than"), ("/other.json", "not its own URL"),
        ] {
            let refused = try await Self.authorize(trusting, base + path)
            #expect(
                refused.status == 400 && Self.text(refused).contains(reason),
                "\(path): \(Self.text(refused).prefix(300))")
        }
        let list = try await CLI.run(["client", "list", "--json", "--data-dir", trusting.dataDirectory])
        #expect(list.stdout.contains(base + "/client.json") && list.stdout.contains("metadata_document"))
        #expect(!list.stdout.contains("redirecting.json"), "a refused document stored nothing")

        // Without the CA: the system's trust store does not know it.
        let untrusting = try await BrokerProcess.start(config: #"{"server": {"client_metadata_hosts": ["localhost"]}}"#)
        defer { untrusting.stop() }
        let unverified = try await Self.authorize(untrusting, base + "/client.json")
        #expect(
            unverified.status == 400 && Self.text(unverified).contains("could not be fetched"),
            "\(Self.text(unverified))")

        // Open registration, no host listed: any public host — and localhost is not one, however it resolves.
        let open = try await BrokerProcess.start(
            config: #"{"server": {"client_registration": "open", "ca_file": "\#(caPath)"}}"#)
        defer { open.stop() }
        let loopback = try await Self.authorize(open, base + "/client.json")
        #expect(
            loopback.status == 400 && Self.text(loopback).contains("not a public address"), "\(Self.text(loopback))")
    }
}
