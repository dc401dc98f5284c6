import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import HTTPTypes
import Testing

/// Resource indicators (RFC 8707, issue "Tokens for every door", item 1): a token asked for with `resource` is
/// for that registered API alone (`aud`), at every grant; an unregistered resource is `invalid_target` and spends
/// nothing.
@Suite("resource indicators: a token for one API")
struct ResourceIndicatorTests {
    typealias OP = OpenIDProviderTests
    typealias Flow = InProcessBrowserFlowTests
    static let files = "https://files.example/api"
    static let other = "https://other.example/mcp"
    static let password = "correct horse battery staple"

    static func registered() async throws -> InProcessBroker {
        let broker = try await InProcessBroker()
        let now = broker.clock.seconds()
        try await broker.store.createResource(ResourceRecord(url: files, scopes: ["files:read"], createdAt: now))
        try await broker.store.createResource(ResourceRecord(url: other, createdAt: now))
        return broker
    }

    static func audience(_ reply: InProcessBroker.Client.Reply) throws -> JSONValue? {
        let token = try #require(reply["access_token"]?.stringValue)
        return try #require(jwtParts(token).claims)["aud"]
    }

    @Test func aResourceIndicatorIsAnHTTPSURLWithoutAFragment() {
        for good in [
            Self.files, "https://api.example", "http://127.0.0.1:8080/mcp", "http://[::1]/x", "http://localhost/",
        ] {
            #expect(ResourceIndicators.problem(good) == nil, "\(good)")
        }
        for bad in [
            "", "api.example", "ftp://api.example", "http://api.example/", "https://api.example/#frag", "https://",
            "https://user@api.example/", "https://api.example/a b", "https://api.example/\u{7F}", "https://ápi.example",
            "http://127.0.0.1.evil.example/", String(repeating: "a", count: 2049),
        ] {
            #expect(ResourceIndicators.problem(bad) != nil, "\(bad)")
        }
    }

    /// The CLI's session: a refresh naming a registered resource gets a token for it alone, without a new
    /// sign-in; an unregistered one is `invalid_target` and the refresh token is not spent.
    @Test func aRefreshNamesTheResourceItsTokenIsFor() async throws {
        let broker = try await Self.registered()
        try await broker.test { client in
            let session = try await client.register("ada@example.com", Self.password)
            #expect(try Self.audience(session) == "broker", "no resource: the APIs' audience, as before")
            let refresh = try #require(session["refresh_token"]?.stringValue)
            let refused = try await client.form(
                "/auth/token",
                [("grant_type", "refresh_token"), ("refresh_token", refresh), ("resource", "https://nope.example/")])
            #expect(refused.status == 400 && refused.error == "invalid_target")
            let forFiles = try await client.form(
                "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh), ("resource", Self.files)])
            #expect(forFiles.status == 200, "the refused refresh spent nothing")
            #expect(try Self.audience(forFiles) == .string(Self.files))
            let files = try #require(forFiles["access_token"]?.stringValue)
            #expect(try await client.get("/auth/me", bearer: files).status == 401, "broker's own endpoint is not it")
            let forOther = try await client.form(
                "/auth/token",
                [
                    ("grant_type", "refresh_token"),
                    ("refresh_token", try #require(forFiles["refresh_token"]?.stringValue)),
                    ("resource", Self.other),
                ])
            #expect(try Self.audience(forOther) == .string(Self.other))
            let account = try await client.form(
                "/auth/token",
                [
                    ("grant_type", "refresh_token"),
                    ("refresh_token", try #require(forOther["refresh_token"]?.stringValue)),
                    ("scope", "account"), ("resource", Self.files),
                ])
            #expect(account.status == 400 && account.error == "invalid_target")
        }
    }

    /// CI: `client_credentials` with `resource` mints for that API; an unregistered one, or one that disagrees
    /// with `audience`, is refused. A registered resource's tokens are introspected by the operator's client.
    @Test func aCIClientMintsForARegisteredResourceAndIntrospectsIt() async throws {
        let broker = try await Self.registered()
        let secret = try ClientSecretHasher.newSecret()
        try await broker.store.createClient(
            ClientRecord(
                name: "deploy", secretHash: broker.service.clients.clientSecrets.hash(secret), scopes: [], trust: nil,
                createdAt: broker.clock.seconds()))
        try await broker.test { client in
            func mint(_ extra: [(String, String)]) async throws -> InProcessBroker.Client.Reply {
                try await client.form(
                    "/auth/token",
                    [("grant_type", "client_credentials"), ("client_id", "deploy"), ("client_secret", secret.exposed)]
                        + extra)
            }
            let minted = try await mint([("resource", Self.files)])
            #expect(minted.status == 200)
            #expect(try Self.audience(minted) == .string(Self.files))
            #expect(try await mint([("resource", "https://unregistered.example/")]).error == "invalid_target")
            #expect(try await mint([("resource", Self.files), ("audience", "broker")]).error == "invalid_request")
            #expect(try await mint([("resource", Self.files), ("audience", Self.files)]).status == 200)

            let headers: HTTPFields = [
                .contentType: "application/x-www-form-urlencoded",
                .authorization: HTTPBasic.header(id: "deploy", secret: secret).value,
            ]
            let introspected = try await client.send(
                .post, "/auth/introspect", headers: headers,
                body: Array(
                    FormEncoding.encode([("token", try #require(minted["access_token"]?.stringValue))]).utf8))
            #expect(introspected["active"] == true && introspected["aud"] == .string(Self.files))
        }
    }

    /// An app: `resource` at `/auth/authorize` is checked there (an unregistered one goes back as `invalid_target`),
    /// its entry's scopes may be asked for with it, and the code's token is for it; the code cannot be turned into
    /// a token for another resource.
    @Test func anAppsCodeIsForTheResourceItsRequestNamed() async throws {
        let broker = try await Self.registered()
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("bo@example.com", Self.password)
            let jar = OP.Jar()
            let unknown = try await OP.get(
                client, OP.authorizeURI(OP.webRequest(extra: [("resource", "https://unregistered.example/")])), jar)
            let refused = Flow.query(try #require(unknown.header("Location")))
            #expect(refused["error"] == "invalid_target" && refused["state"] == "st-1")
            let notAllowed = try await OP.get(
                client, OP.authorizeURI(OP.webRequest(scope: "openid files:read")), jar)
            // Without the resource that allows it, files:read is left out of the grant — not an error (Core
            // 3.1.2.1): the sign-in page.
            #expect(notAllowed.status == 200 && notAllowed.header("Location") == nil)

            func code(_ resource: String) async throws -> String {
                let page = try await OP.get(
                    client,
                    OP.authorizeURI(OP.webRequest(scope: "openid files:read", extra: [("resource", resource)])), jar)
                let destination: String
                if let location = page.header("Location") {
                    destination = location
                } else {
                    let signedIn = try await OP.passwordSignIn(client, page: page, jar, email: "bo@example.com")
                    destination = try #require(OP.destination(signedIn))
                }
                return try #require(Flow.query(destination)["code"], "\(destination)")
            }
            let tokens = try await OP.redeem(client, code: try await code(Self.files))
            #expect(tokens.status == 200, "\(String(describing: tokens.json))")
            let access = try #require(tokens["access_token"]?.stringValue)
            let claims = try #require(jwtParts(access).claims)
            #expect(claims["aud"] == .string(Self.files) && claims["scope"] == "openid files:read")
            let id = try #require(tokens["id_token"]?.stringValue)
            let idToken = try #require(jwtParts(id).claims)
            #expect(idToken["aud"] == "web", "the id token stays the app's")

            let elsewhere = try await OP.redeem(
                client, code: try await code(Self.files), extra: [("resource", Self.other)])
            #expect(elsewhere.status == 400 && elsewhere.error == "invalid_target")
            let same = try await OP.redeem(client, code: try await code(Self.files), extra: [("resource", Self.files)])
            #expect(same.status == 200)
        }
    }

    /// The device grant: the poll that collects the session may name the resource its first token is for; an
    /// unregistered one is refused before the poll spends the approved code.
    @Test func theDeviceGrantNamesTheResourceOfItsFirstToken() async throws {
        typealias Device = InProcessDeviceTests
        let broker = try await Self.registered()
        try await broker.test { client in
            #expect(try await client.register("dev@example.com", Self.password).status == 201)
            let started = try await Device.authorize(client)
            let deviceCode = try #require(started["device_code"]?.stringValue)
            let userCode = try #require(started["user_code"]?.stringValue)
            _ = try await Device.approveWithPassword(client, userCode: userCode, email: "dev@example.com")
            func poll(_ resource: String) async throws -> InProcessBroker.Client.Reply {
                try await client.form(
                    "/auth/token",
                    [
                        ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", deviceCode),
                        ("client_id", "broker-cli"), ("resource", resource),
                    ])
            }
            #expect(try await poll("https://unregistered.example/").error == "invalid_target")
            let session = try await poll(Self.other)
            #expect(session.status == 200, "the refused poll spent nothing")
            #expect(try Self.audience(session) == .string(Self.other))
        }
    }
}
