import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import HTTPTypes
import Testing

/// Client ID Metadata Documents (issue "Tokens for every door" item 4): an https URL as `client_id`, the app
/// described by the JSON document there. Fetched through the scripted transport here (what the fetch itself refuses
/// — private addresses, size, time — is the HTTP client's, in HTTPClientTests; a private CA, in the end-to-end
/// test); every bad document is a clear `invalid_client` and stores nothing.
@Suite("client ID metadata documents: an app described at its client_id URL")
struct ClientMetadataDocumentTests {
    typealias OP = OpenIDProviderTests
    typealias Reply = InProcessBroker.Client.Reply
    static let url = "https://agent.example/oauth/client.json"
    static let redirect = "http://127.0.0.1:7000/callback"
    static let password = "correct horse battery staple"

    static func document(_ changes: [String: JSONValue] = [:], clientID: String = url) -> JSONValue {
        var fields: [String: JSONValue] = [
            "client_id": .string(clientID), "client_name": "Agent", "redirect_uris": .array([.string(redirect)]),
            "grant_types": ["authorization_code", "refresh_token"], "token_endpoint_auth_method": "none",
        ]
        fields.merge(changes) { _, new in new }
        return .object(fields)
    }

    static func authorize(_ client: InProcessBroker.Client, _ jar: OP.Jar, pkce: PKCE, clientID: String = url)
        async throws -> Reply
    {
        try await OP.get(
            client,
            OP.authorizeURI([
                ("response_type", "code"), ("client_id", clientID), ("redirect_uri", redirect),
                ("scope", "openid"), ("state", "s"), ("code_challenge", pkce.challenge),
                ("code_challenge_method", "S256"),
            ]), jar)
    }

    @Test func anAppDescribedAtItsURLSignsInAndIsFetchedOncePerFreshness() async throws {
        let broker = try await InProcessBroker(config: #"{"server": {"client_registration": "open"}}"#)
        broker.transport.on("GET", Self.url) { request in
            #expect(request.publicAddressesOnly, "a URL someone else chose: public addresses only")
            var response = ScriptedTransport.json(Self.document())
            response.headers.append((name: "Cache-Control", value: "max-age=600"))
            return response
        }
        try await broker.test { client in
            let discovery = try await client.get("/.well-known/oauth-authorization-server")
            #expect(discovery["client_id_metadata_document_supported"] == true)
            #expect(try await client.register("ada@example.com", Self.password).status == 201)
            let jar = OP.Jar()
            let pkce = try PKCE.generate()
            let page = try await Self.authorize(client, jar, pkce: pkce)
            #expect(page.status == 200, "\(String(decoding: page.body, as: UTF8.self).prefix(300))")
            let consent = try await OP.passwordSignIn(client, page: page, jar, email: "ada@example.com")
            let html = String(decoding: consent.body, as: UTF8.self)
            #expect(html.contains("describes itself in a document at <strong>agent.example</strong>"))
            let allowed = try await OP.allow(client, consent: consent, jar)
            let destination = try #require(OP.destination(allowed))
            let code = try #require(InProcessBrowserFlowTests.query(destination)["code"])
            let tokens = try await client.form(
                "/auth/token",
                [
                    ("grant_type", "authorization_code"), ("code", code), ("client_id", Self.url),
                    ("redirect_uri", Self.redirect), ("code_verifier", pkce.verifier),
                ])
            #expect(tokens.status == 200, "\(tokens.json?.serialized() ?? "")")
            #expect(broker.transport.count("GET", Self.url) == 1, "kept for its max-age")
            let stored = try #require(try await broker.store.app(clientID: Self.url))
            #expect(
                stored.isPublic
                    && stored.registration == AppRecord.Registration(mode: "metadata_document", clientName: "Agent"))
            // Past its freshness, fetched again; a change of redirect URIs is taken.
            broker.clock.advance(by: 601)
            _ = try await Self.authorize(client, OP.Jar(), pkce: pkce)
            #expect(broker.transport.count("GET", Self.url) == 2)
        }
    }

    @Test func aBadDocumentIsAClearErrorAndStoresNothing() async throws {
        let cases: [(String, ScriptedTransport.Answer, String)] = [
            (
                "redirect",
                { _ in
                    HTTPClientResponse(
                        status: 302, headers: [(name: "Location", value: "https://x.example/")], body: [])
                }, "redirects"
            ),
            (
                "not JSON", { _ in HTTPClientResponse(status: 200, headers: [], body: Array("<html>".utf8)) },
                "not a JSON object"
            ),
            (
                "another client_id",
                { _ in ScriptedTransport.json(Self.document(clientID: "https://evil.example/c.json")) },
                "not its own URL"
            ),
            (
                "a secret",
                { _ in ScriptedTransport.json(Self.document(["token_endpoint_auth_method": "client_secret_basic"])) },
                "only public clients"
            ),
            (
                "a private-use redirect",
                { _ in ScriptedTransport.json(Self.document(["redirect_uris": ["com.example.app:/cb"]])) },
                "https redirect URIs"
            ),
            ("no redirect", { _ in ScriptedTransport.json(Self.document(["redirect_uris": []])) }, "redirect_uris"),
            ("too large", ScriptedTransport.failure(.responseTooLarge, "too large"), "larger than 16384 bytes"),
            ("slow", ScriptedTransport.failure(.timeout, "timed out"), "did not arrive within"),
            (
                "private",
                ScriptedTransport.failure(.forbiddenAddress, "refusing to connect to 10.0.0.5: not a public address"),
                "10.0.0.5"
            ),
            ("an error", { _ in HTTPClientResponse(status: 500, headers: [], body: []) }, "HTTP 500"),
        ]
        for (why, answer, expected) in cases {
            let broker = try await InProcessBroker(config: #"{"server": {"client_registration": "open"}}"#)
            broker.transport.on("GET", Self.url, answer)
            try await broker.test { client in
                let refused = try await Self.authorize(client, OP.Jar(), pkce: try PKCE.generate())
                #expect(refused.status == 400 && refused.error == "invalid_client", "\(why): \(refused.status)")
                let detail = refused.json?["error_description"]?.stringValue ?? ""
                #expect(detail.contains(expected), "\(why): \(detail)")
                #expect(try await broker.store.apps().isEmpty, "\(why): nothing stored")
            }
        }
    }

    @Test func whichURLsMayBeFetchedAtAll() async throws {
        // Off unless registration is open or hosts are listed.
        let off = try await InProcessBroker()
        try await off.test { client in
            let refused = try await Self.authorize(client, OP.Jar(), pkce: try PKCE.generate())
            #expect(
                refused.status == 400 && refused.json?["error_description"]?.stringValue?.contains("takes no") == true)
            #expect(
                try await client.get("/.well-known/openid-configuration")["client_id_metadata_document_supported"]
                    == nil)
            #expect(off.transport.sent.isEmpty, "nothing fetched")
        }
        let listed = try await InProcessBroker(config: #"{"server": {"client_metadata_hosts": ["apps.example"]}}"#)
        listed.transport.on("GET", "https://apps.example/c.json") { request in
            #expect(!request.publicAddressesOnly, "a listed host may be on a private network")
            return ScriptedTransport.json(Self.document(clientID: "https://apps.example/c.json"))
        }
        try await listed.test { client in
            let notListed = try await Self.authorize(client, OP.Jar(), pkce: try PKCE.generate())
            #expect(notListed.json?["error_description"]?.stringValue?.contains("client_metadata_hosts") == true)
            for bad in [
                "https://apps.example/", "https://apps.example", "https://apps.example/c.json?x=1",
                "https://u@apps.example/c.json",
            ] {
                let reply = try await Self.authorize(client, OP.Jar(), pkce: try PKCE.generate(), clientID: bad)
                #expect(reply.status == 400 && reply.error == "invalid_client", "\(bad)")
            }
            let good = try await Self.authorize(
                client, OP.Jar(), pkce: try PKCE.generate(), clientID: "https://apps.example/c.json")
            #expect(good.status == 200)
        }
        // A registered resource's URL cannot be an app's client_id (its tokens would carry it as aud).
        let resource = try await InProcessBroker(config: #"{"server": {"client_registration": "open"}}"#)
        try await resource.store.createResource(ResourceRecord(url: Self.url, createdAt: resource.clock.seconds()))
        resource.transport.on("GET", Self.url) { _ in ScriptedTransport.json(Self.document()) }
        try await resource.test { client in
            let refused = try await Self.authorize(client, OP.Jar(), pkce: try PKCE.generate())
            #expect(refused.json?["error_description"]?.stringValue?.contains("registered resource") == true)
            #expect(try await resource.store.apps().isEmpty)
        }
    }

    /// Each unknown client_id is a fetch anyone can cause: at most 20 a minute per host (and 120 in all).
    @Test func fetchesAreLimitedPerHost() async throws {
        let broker = try await InProcessBroker(config: #"{"server": {"client_registration": "open"}}"#)
        for index in 0..<21 {
            let url = "https://agent.example/c\(index).json"
            broker.transport.on("GET", url) { _ in ScriptedTransport.json(Self.document(clientID: url)) }
        }
        broker.transport.on("GET", "https://other.example/c.json") { _ in
            ScriptedTransport.json(Self.document(clientID: "https://other.example/c.json"))
        }
        try await broker.test { client in
            for index in 0..<20 {
                let page = try await Self.authorize(
                    client, OP.Jar(), pkce: try PKCE.generate(), clientID: "https://agent.example/c\(index).json")
                #expect(page.status == 200, "\(index)")
            }
            let limited = try await Self.authorize(
                client, OP.Jar(), pkce: try PKCE.generate(), clientID: "https://agent.example/c20.json")
            #expect(
                limited.status == 400 && limited.json?["error_description"]?.stringValue?.contains("too many") == true)
            #expect(broker.transport.count("GET", "https://agent.example/c20.json") == 0, "not fetched")
            let other = try await Self.authorize(
                client, OP.Jar(), pkce: try PKCE.generate(), clientID: "https://other.example/c.json")
            #expect(other.status == 200, "another host has its own allowance")
            // A minute later the host may be asked again.
            broker.clock.advance(by: 60)
            let later = try await Self.authorize(
                client, OP.Jar(), pkce: try PKCE.generate(), clientID: "https://agent.example/c20.json")
            #expect(later.status == 200)
        }
    }

    @Test func freshnessFollowsCacheControlWithinBounds() {
        let freshness = ClientMetadataDocuments.freshness
        #expect(freshness(nil) == 300)
        #expect(freshness("public, max-age=3600") == 3600)
        #expect(freshness("max-age=1") == 60)
        #expect(freshness("max-age=999999999") == 86_400)
        #expect(freshness("no-store") == 60)
        #expect(freshness("max-age=nope") == 300)
    }
}
