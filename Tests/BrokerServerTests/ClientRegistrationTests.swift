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

/// Apps that register themselves (RFC 7591, issue "Tokens for every door" item 4) and bearer-only resources
/// (item 3): `POST /auth/clients` off by default, `open` for public clients with https or loopback redirects,
/// `token` with a one-time initial access token; a registered app signs users in like any other, its consent page
/// saying it registered itself. Every refusal stores nothing.
@Suite("client registration (RFC 7591) and bearer-only resources")
struct ClientRegistrationTests {
    typealias OP = OpenIDProviderTests
    typealias Reply = InProcessBroker.Client.Reply
    static let password = "correct horse battery staple"
    static let mcp = "http://127.0.0.1:9911/mcp"

    static func broker(_ mode: String, perHour: Int = 50) async throws -> InProcessBroker {
        try await InProcessBroker(
            config: #"{"server": {"client_registration": "\#(mode)", "registrations_per_hour": \#(perHour)}}"#)
    }

    static func register(_ client: InProcessBroker.Client, _ metadata: JSONValue, token: String? = nil)
        async throws -> Reply
    {
        var headers: HTTPFields = [.contentType: "application/json"]
        if let token { headers[.authorization] = "Bearer \(token)" }
        return try await client.send(.post, "/auth/clients", headers: headers, body: metadata.serializedBytes)
    }

    static let loopbackApp: JSONValue = [
        "redirect_uris": ["http://127.0.0.1:5555/callback"], "client_name": "Agent <b>Smith</b>",
        "token_endpoint_auth_method": "none", "grant_types": ["authorization_code", "refresh_token"],
        "scope": "openid profile",
    ]

    /// `count` initial access tokens in `broker`'s store, each good for ten minutes.
    static func initialTokens(_ broker: InProcessBroker, count: Int) async throws -> [String] {
        let now = broker.clock.seconds()
        let tokens = (0..<count).map { "initial-\($0)-0123456789abcdefghijklmnopqrstuvwxyz" }
        for token in tokens {
            try await broker.store.createRegistrationToken(
                hash: Digest.sha256(token), RegistrationTokenRecord(createdAt: now, expiresAt: now + 600))
        }
        return tokens
    }

    static func with(_ document: JSONValue, _ key: String, _ value: JSONValue) -> JSONValue {
        guard case .object(var fields) = document else { return document }
        fields[key] = value
        return .object(fields)
    }

    static func claims(_ reply: Reply) throws -> JSONValue {
        let token = try #require(reply["access_token"]?.stringValue)
        return try #require(jwtParts(token).claims)
    }

    @Test func registrationIsOffUnlessConfiguredAndUnpublished() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let refused = try await Self.register(client, Self.loopbackApp)
            #expect(refused.status == 404 && refused.error == "not_found")
            let discovery = try await client.get("/.well-known/openid-configuration")
            #expect(discovery["registration_endpoint"] == nil)
            #expect(try await broker.store.apps().isEmpty)
        }
        let open = try await Self.broker("open")
        try await open.test { client in
            let discovery = try await client.get("/.well-known/oauth-authorization-server")
            #expect(discovery["registration_endpoint"]?.stringValue == "http://broker.test/auth/clients")
        }
        #expect(throws: ConfigurationError.self) {
            try ServerConfiguration.load(
                catalog: [], file: (Array(#"{"server": {"client_registration": "yes"}}"#.utf8), "test.json"),
                environment: [:])
        }
    }

    /// An open registration: a public app, whatever it asked for; it signs a user in through the consent page that
    /// names it as self-registered, and gets a token for a registered resource.
    @Test func anOpenRegistrationMakesAPublicAppThatSignsInWithConsent() async throws {
        let broker = try await Self.broker("open")
        try await broker.store.createResource(ResourceRecord(url: Self.mcp, createdAt: broker.clock.seconds()))
        try await broker.test { client in
            #expect(try await client.register("ada@example.com", Self.password).status == 201)
            let asked = Self.with(Self.loopbackApp, "token_endpoint_auth_method", "client_secret_post")
            let registered = try await Self.register(client, asked)
            #expect(registered.status == 201)
            #expect(registered.header("Cache-Control") == "no-store")
            let clientID = try #require(registered["client_id"]?.stringValue)
            #expect(clientID.hasPrefix("reg-"))
            #expect(registered["token_endpoint_auth_method"] == "none", "open: public clients only")
            #expect(registered["client_secret"] == nil)
            #expect(registered["client_name"] == "Agent <b>Smith</b>")
            #expect(registered["redirect_uris"] == ["http://127.0.0.1:5555/callback"])
            let app = try #require(try await broker.store.app(clientID: clientID))
            #expect(
                app.isPublic
                    && app.registration == AppRecord.Registration(mode: "open", clientName: "Agent <b>Smith</b>"))

            // The app's sign-in: the sign-in page, the password, then consent naming it as self-registered.
            let pkce = try PKCE.generate()
            let jar = OP.Jar()
            let page = try await OP.get(
                client,
                OP.authorizeURI([
                    ("response_type", "code"), ("client_id", clientID),
                    ("redirect_uri", "http://127.0.0.1:6001/callback"), ("scope", "openid profile"),
                    ("state", "s1"), ("code_challenge", pkce.challenge), ("code_challenge_method", "S256"),
                    ("resource", Self.mcp),
                ]), jar)
            #expect(page.status == 200)
            let consent = try await OP.passwordSignIn(client, page: page, jar, email: "ada@example.com")
            let html = String(decoding: consent.body, as: UTF8.self)
            #expect(html.contains("This app registered itself"))
            #expect(html.contains("an app on this device (<strong>127.0.0.1</strong>)"), "the host its answer goes to")
            #expect(html.contains("Agent &lt;b&gt;Smith&lt;/b&gt;"), "its name, escaped")
            #expect(!html.contains("<b>Smith"))
            #expect(html.contains(Self.mcp))
            let allowed = try await OP.allow(client, consent: consent, jar)
            let destination = try #require(OP.destination(allowed))
            #expect(destination.hasPrefix("http://127.0.0.1:6001/callback?"))
            let code = try #require(InProcessBrowserFlowTests.query(destination)["code"])
            let tokens = try await client.form(
                "/auth/token",
                [
                    ("grant_type", "authorization_code"), ("code", code), ("client_id", clientID),
                    ("redirect_uri", "http://127.0.0.1:6001/callback"), ("code_verifier", pkce.verifier),
                    ("resource", Self.mcp),
                ])
            #expect(tokens.status == 200)
            let claims = try Self.claims(tokens)
            #expect(claims["aud"] == .string(Self.mcp))
            #expect(claims["client_id"] == .string(clientID))
        }
    }

    @Test func anOpenRegistrationRefusesWhatItCannotShowOrReachAndStoresNothing() async throws {
        let broker = try await Self.broker("open")
        try await broker.test { client in
            func refused(_ change: (inout [String: JSONValue]) -> Void) async throws -> Reply {
                guard case .object(var fields) = Self.loopbackApp else { preconditionFailure() }
                change(&fields)
                return try await Self.register(client, .object(fields))
            }
            let cases: [(String, String, (inout [String: JSONValue]) -> Void)] = [
                ("invalid_redirect_uri", "private-use scheme", { $0["redirect_uris"] = ["com.example.app:/cb"] }),
                ("invalid_redirect_uri", "plain http elsewhere", { $0["redirect_uris"] = ["http://app.example/cb"] }),
                ("invalid_redirect_uri", "a fragment", { $0["redirect_uris"] = ["https://app.example/cb#x"] }),
                ("invalid_redirect_uri", "none", { $0["redirect_uris"] = [] }),
                ("invalid_redirect_uri", "missing", { $0["redirect_uris"] = nil }),
                ("invalid_client_metadata", "not strings", { $0["redirect_uris"] = [1] }),
                ("invalid_client_metadata", "not a list", { $0["redirect_uris"] = "https://app.example/cb" }),
                ("invalid_client_metadata", "back-channel", { $0["backchannel_logout_uri"] = "https://app.example/l" }),
                ("invalid_client_metadata", "implicit", { $0["response_types"] = ["token"] }),
                ("invalid_client_metadata", "grant", { $0["grant_types"] = ["client_credentials"] }),
                ("invalid_client_metadata", "jwks", { $0["jwks_uri"] = "https://app.example/jwks" }),
                ("invalid_client_metadata", "name", { $0["client_name"] = "evil\u{202E}name\u{0007}" }),
                (
                    "invalid_client_metadata", "long name",
                    { $0["client_name"] = .string(String(repeating: "n", count: 101)) }
                ),
                ("invalid_client_metadata", "scope", { $0["scope"] = "openid \"x\"" }),
                ("invalid_client_metadata", "alg", { $0["id_token_signed_response_alg"] = "none" }),
            ]
            for (code, why, change) in cases {
                let reply = try await refused(change)
                #expect(reply.status == 400 && reply.error == code, "\(why): \(reply.status) \(reply.error ?? "-")")
            }
            let notJSON = try await client.send(
                .post, "/auth/clients", headers: [.contentType: "application/json"], body: Array("{nope".utf8))
            #expect(notJSON.status == 400 && notJSON.error == "invalid_request")
            let form = try await client.form("/auth/clients", [("redirect_uris", "https://app.example/cb")])
            #expect(form.status == 415, "RFC 7591 is JSON")
            #expect(try await broker.store.apps().isEmpty, "nothing was stored")
            // Unknown metadata is ignored (RFC 7591 §2).
            let extra = Self.with(Self.loopbackApp, "logo_uri", "https://app.example/logo.png")
            #expect(try await Self.register(client, extra).status == 201)
            let metrics = try await client.get("/metrics")
            let text = String(decoding: metrics.body, as: UTF8.self)
            #expect(text.contains(#"broker_client_registrations_total{outcome="invalid_redirect_uri"} 5"#))
            #expect(text.contains(#"broker_client_registrations_total{outcome="registered"} 1"#))
        }
    }

    /// Per source network: the in-process client has no address, so the service is asked as the router would.
    @Test func anOpenRegistrationIsRateLimitedPerAddress() async throws {
        let broker = try await Self.broker("open", perHour: 2)
        let service = broker.service.registrations
        let input = try RequestInput.parse(
            body: Self.loopbackApp.serializedBytes, contentType: "application/json", allowForm: false)
        for _ in 0..<2 {
            #expect(try await service.register(input, authorization: nil, address: "203.0.113.5").status == 201)
        }
        do {
            _ = try await service.register(input, authorization: nil, address: "203.0.113.5")
            Issue.record("a third registration from one address within the hour was taken")
        } catch let error as APIError {
            #expect(error.status == 429 && error.headers.contains { $0.0 == "Retry-After" })
        }
        #expect(try await service.register(input, authorization: nil, address: "198.51.100.7").status == 201)
        #expect(try await broker.store.apps().count == 3)
    }

    /// `token`: an initial access token registers one app (a confidential one may get a secret); none, a spent, an
    /// expired or an unknown one is 401; a refused registration does not spend the token.
    @Test func aTokenRegistrationSpendsItsInitialAccessTokenOnce() async throws {
        let broker = try await Self.broker("token")
        let now = broker.clock.seconds()
        let token = "initial-0123456789abcdefghijklmnopqrstuvwxyz"
        let expired = "expired-0123456789abcdefghijklmnopqrstuvwxyz"
        try await broker.store.createRegistrationToken(
            hash: Digest.sha256(token), RegistrationTokenRecord(createdAt: now, expiresAt: now + 600))
        try await broker.store.createRegistrationToken(
            hash: Digest.sha256(expired), RegistrationTokenRecord(createdAt: now - 900, expiresAt: now - 1))
        let web: JSONValue = [
            "redirect_uris": ["https://app.example/cb"], "client_name": "Web app",
            "post_logout_redirect_uris": ["https://app.example/bye"],
        ]
        try await broker.test { client in
            let none = try await Self.register(client, web)
            #expect(none.status == 401 && none.error == "invalid_token")
            #expect(none.header("WWW-Authenticate")?.hasPrefix("Bearer") == true)
            #expect(try await Self.register(client, web, token: expired).status == 401)
            #expect(try await Self.register(client, web, token: "unknown").status == 401)
            let bad = try await Self.register(client, ["redirect_uris": ["ftp://x"]], token: token)
            #expect(bad.status == 400, "refused metadata spends nothing")
            let registered = try await Self.register(client, web, token: token)
            #expect(registered.status == 201)
            #expect(registered["token_endpoint_auth_method"] == "client_secret_basic", "RFC 7591's default")
            let clientID = try #require(registered["client_id"]?.stringValue)
            let secret = try #require(registered["client_secret"]?.stringValue)
            #expect(registered["client_secret_expires_at"] == 0)
            let app = try #require(try await broker.store.app(clientID: clientID))
            #expect(!app.isPublic && app.registration?.mode == "token")
            #expect(app.postLogoutRedirectURIs == ["https://app.example/bye"])
            #expect(broker.service.appTokens.secrets.verify(Secret(secret), against: try #require(app.secretHash)))
            let again = try await Self.register(client, web, token: token)
            #expect(again.status == 401, "one registration per token")
            #expect(try await broker.store.apps().count == 1)
            // A native app may still take a private-use scheme with a token.
            try await broker.store.createRegistrationToken(
                hash: Digest.sha256(token + "2"), RegistrationTokenRecord(createdAt: now, expiresAt: now + 600))
            let native = try await Self.register(
                client, ["redirect_uris": ["com.example.app:/cb"], "token_endpoint_auth_method": "none"],
                token: token + "2")
            #expect(native.status == 201 && native["client_secret"] == nil)
        }
    }

    /// A bearer-only resource (a git server): its token is unbound even under a proof, and short-lived; the
    /// session stays bound.
    @Test func aBearerOnlyResourceGetsAnUnboundShortLivedToken() async throws {
        let broker = try await InProcessBroker(config: #"{"server": {"access_token_ttl": 3600}}"#)
        let git = "https://git.example"
        try await broker.store.createResource(ResourceRecord(url: git, createdAt: broker.clock.seconds(), bearer: true))
        try await broker.store.createResource(
            ResourceRecord(url: Self.mcp, createdAt: broker.clock.seconds()))
        let key = try AsymmetricKey.generate(.ecP256)
        try await broker.test { client in
            #expect(try await client.register("ada@example.com", Self.password).status == 201)
            let now = broker.clock.seconds()
            let signedIn = try await DPoPTests.login(
                client, "ada@example.com", proof: try DPoPTests.proof(key, "POST", "/auth/login", at: now))
            #expect(signedIn["token_type"] == "DPoP")
            func refresh(_ token: String, resource: String) async throws -> Reply {
                var headers: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
                headers[DPoPTests.dpop] = try DPoPTests.proof(key, "POST", "/auth/token", at: broker.clock.seconds())
                return try await client.send(
                    .post, "/auth/token", headers: headers,
                    body: Array(
                        FormEncoding.encode([
                            ("grant_type", "refresh_token"), ("refresh_token", token), ("resource", resource),
                        ]).utf8))
            }
            let forGit = try await refresh(try #require(signedIn["refresh_token"]?.stringValue), resource: git)
            #expect(forGit.status == 200)
            #expect(forGit["token_type"] == "Bearer")
            #expect(forGit["expires_in"] == 300)
            let gitClaims = try Self.claims(forGit)
            #expect(gitClaims["cnf"] == nil && gitClaims["aud"] == .string(git))
            let lifetime = (gitClaims["exp"]?.intValue ?? 0) - (gitClaims["iat"]?.intValue ?? 0)
            #expect(lifetime == 300)
            let forMCP = try await refresh(try #require(forGit["refresh_token"]?.stringValue), resource: Self.mcp)
            #expect(forMCP["token_type"] == "DPoP" && forMCP["expires_in"] == 3600)
            let mcpClaims = try Self.claims(forMCP)
            #expect(mcpClaims["cnf"] != nil, "a resource that is not bearer-only keeps the binding")
            // The session's refresh token is still bound: without the proof it is refused.
            let unproven = try await client.form(
                "/auth/token",
                [
                    ("grant_type", "refresh_token"),
                    ("refresh_token", try #require(forMCP["refresh_token"]?.stringValue)),
                    ("resource", git),
                ])
            #expect(unproven.status == 400 && unproven.error == "invalid_dpop_proof")
        }
    }
}
