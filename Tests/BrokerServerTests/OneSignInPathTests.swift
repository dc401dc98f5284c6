import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import HTTPTypes
import Testing

/// One sign-in path (issue "Rooms, round four", item 1): the CLI is a built-in public client of broker's own
/// OpenID Provider, `broker-cli`. Its sign-ins and apps' go through one authorization request, one code record and
/// one `authorization_code` grant; `/auth/{provider}/start` stays the CLI's shortcut into that request.
@Suite("one sign-in path: the CLI is a client of the OpenID Provider")
struct OneSignInPathTests {
    typealias OP = OpenIDProviderTests
    typealias Flow = InProcessBrowserFlowTests
    typealias Jar = OpenIDProviderTests.Jar
    static let loopback = "http://127.0.0.1:5555/callback"

    static func cliRequest(_ pkce: PKCE, redirect: String = loopback, state: String? = "cli-state")
        -> [(String, String)]
    {
        var parameters = [
            ("response_type", "code"), ("client_id", "broker-cli"), ("redirect_uri", redirect),
            ("code_challenge", pkce.challenge), ("code_challenge_method", "S256"),
        ]
        if let state { parameters.append(("state", state)) }
        return parameters
    }

    /// The CLI's code exchange exactly as the contract's loopback flow sends it: no client id, the verifier.
    static func redeemAsCLI(_ client: InProcessBroker.Client, code: String, verifier: String) async throws
        -> InProcessBroker.Client.Reply
    {
        try await client.form(
            "/auth/token",
            [
                ("grant_type", "authorization_code"), ("code", code), ("code_verifier", verifier),
                ("redirect_uri", loopback),
            ])
    }

    /// `/auth/authorize?client_id=broker-cli`: the sign-in page (no consent: the CLI is first-party), a code at the
    /// loopback with `state` and `iss`, redeemed into a CLI session — the APIs' audience, the account scope
    /// available — and a browser session for the next app.
    @Test func theCLISignsInThroughTheAuthorizationEndpointLikeAnyApp() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("ada@example.com", OP.password)
            let pkce = try PKCE.generate()
            let jar = Jar()
            let page = try await OP.get(client, OP.authorizeURI(Self.cliRequest(pkce)), jar)
            #expect(page.status == 200)
            #expect(String(decoding: page.body, as: UTF8.self).contains("<strong>broker-cli</strong>"))
            let signedIn = try await OP.passwordSignIn(client, page: page, jar, email: "ada@example.com")
            let destination = try #require(OP.destination(signedIn), "no consent page for the CLI")
            #expect(destination.hasPrefix(Self.loopback + "?"))
            let back = Flow.query(destination)
            #expect(back["state"] == "cli-state" && back["iss"] == broker.service.issuer)
            let code = try #require(back["code"])

            let session = try await Self.redeemAsCLI(client, code: code, verifier: pkce.verifier)
            #expect(session.status == 200, "\(String(describing: session.json))")
            #expect(session["user_id"]?.stringValue?.hasPrefix("custom:") == true)
            let access = try #require(session["access_token"]?.stringValue)
            let claims = try #require(jwtParts(access).claims)
            #expect(claims["aud"] == "broker", "the APIs' audience, as before")
            #expect(claims["client_id"] == "broker-cli")
            #expect(try await client.get("/auth/me", bearer: access)["email"]?.stringValue == "ada@example.com")
            let account = try await client.accountGrant(
                refreshToken: try #require(session["refresh_token"]?.stringValue))
            #expect(account.status == 200, "a CLI session may ask for its account token")
            let rotated = try #require(account["refresh_token"]?.stringValue)
            #expect(jar.cookies["broker_session"] != nil, "signed in at the broker in this browser")
            // The code is spent: a replay fails and ends the session it started (RFC 6749 §4.1.2).
            #expect(try await Self.redeemAsCLI(client, code: code, verifier: pkce.verifier).error == "invalid_grant")
            #expect(try await client.get("/auth/me", bearer: access).status == 401)
            #expect(try await client.refresh(rotated).error == "invalid_grant", "the whole session ended")

            // Signed in already: the next request of the CLI needs no page at all.
            let again = try PKCE.generate()
            let silent = try await OP.get(client, OP.authorizeURI(Self.cliRequest(again)), jar)
            #expect(silent.status == 302)
            let silentLocation = try #require(silent.header("Location"))
            let silentCode = try #require(Flow.query(silentLocation)["code"])
            #expect(try await Self.redeemAsCLI(client, code: silentCode, verifier: again.verifier).status == 200)
        }
    }

    /// The contract's loopback rules hold at `/auth/authorize` too: a redirect that is not the CLI's loopback
    /// gets a page (never a redirect), and a loopback request without `state`, PKCE or an explicit S256 gets the
    /// error at the loopback.
    @Test func theCLIsRequestIsHeldToTheLoopbackRules() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let pkce = try PKCE.generate()
            for redirect in [
                "https://evil.example/callback", "http://127.0.0.1:5555/other", "http://localhost:5555/callback",
                "http://127.0.0.1:5555/callback?x=1",
            ] {
                let reply = try await client.get(OP.authorizeURI(Self.cliRequest(pkce, redirect: redirect)))
                #expect(reply.status == 400 && reply.header("Location") == nil, "\(redirect)")
            }
            func error(_ parameters: [(String, String)]) async throws -> [String: String] {
                let reply = try await client.get(OP.authorizeURI(parameters))
                #expect(reply.status == 302)
                return Flow.query(try #require(reply.header("Location")))
            }
            #expect(try await error(Self.cliRequest(pkce, state: nil))["error"] == "invalid_request")
            let noPKCE = Self.cliRequest(pkce).filter { !$0.0.hasPrefix("code_challenge") }
            #expect(try await error(noPKCE)["error"] == "invalid_request")
            let implicitMethod = Self.cliRequest(pkce).filter { $0.0 != "code_challenge_method" }
            #expect(try await error(implicitMethod)["error_description"]?.contains("S256") == true)
            let long = Self.cliRequest(pkce, state: String(repeating: "s", count: 513))
            #expect(try await error(long)["error"] == "invalid_request")
        }
    }

    /// One grant, and no code crosses clients: an app's code redeemed the CLI's way, or the CLI's code with an
    /// app's credentials, is refused — so a CLI session (the APIs' audience, the account scope) comes only from a
    /// code issued to `broker-cli`, which no registration can take (RT3-10).
    @Test func noCodeCrossesFromAnAppToTheCLIOrBack() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("bo@example.com", OP.password)
            let jar = Jar()
            let page = try await OP.get(
                client, OP.authorizeURI(OP.webRequest(extra: [("code_challenge", try PKCE.generate().challenge)])), jar)
            let signedIn = try await OP.passwordSignIn(client, page: page, jar, email: "bo@example.com")
            let appDestination = try #require(OP.destination(signedIn))
            let appCode = try #require(Flow.query(appDestination)["code"])
            let asCLI = try await client.form(
                "/auth/token",
                [
                    ("grant_type", "authorization_code"), ("code", appCode), ("code_verifier", "x"),
                    ("redirect_uri", OP.web),
                ])
            #expect(asCLI.status == 400 && asCLI.error == "invalid_grant", "\(String(describing: asCLI.json))")
            #expect(asCLI["error_description"]?.stringValue?.contains("another client") == true)

            let pkce = try PKCE.generate()
            let cliPage = try await OP.get(client, OP.authorizeURI(Self.cliRequest(pkce)), jar)
            #expect(cliPage.status == 302, "the browser session signs the CLI in at once")
            let cliLocation = try #require(cliPage.header("Location"))
            let cliCode = try #require(Flow.query(cliLocation)["code"])
            let asApp = try await OP.redeem(
                client, code: cliCode, redirect: Self.loopback, extra: [("code_verifier", pkce.verifier)])
            #expect(asApp.status == 400 && asApp.error == "invalid_grant")
            let named = try await client.form(
                "/auth/token",
                [
                    ("grant_type", "authorization_code"), ("code", cliCode), ("code_verifier", pkce.verifier),
                    ("redirect_uri", Self.loopback), ("client_id", "broker-cli"), ("client_secret", "anything"),
                ])
            #expect(named.status == 401 && named.error == "invalid_client", "the CLI has no secret to send")
        }
    }

    /// The shortcut `/auth/{provider}/start` is that same request for `broker-cli`, straight to one provider: its
    /// code is the one record and grant, and it starts no browser session (a `broker login` leaves the browser
    /// signed in to nothing it was not before).
    @Test func theStartShortcutIsTheSameRequestWithoutABrowserSession() async throws {
        let broker = try await InProcessBroker(config: Flow.config)
        let google = try Flow.ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        try await broker.test { client in
            let pkce = try PKCE.generate()
            let (state, nonce) = try await Flow.start(client, pkce: pkce)
            google.answerTokens(subject: "1045", nonce: nonce)
            let callback = try await client.get(
                "/auth/google/callback?" + FormEncoding.encode([("state", state), ("code", "provider-code")]))
            #expect(callback.status == 302)
            #expect(
                !callback.headers[values: .setCookie].contains { $0.hasPrefix("broker_session=") },
                "no browser session")
            let location = try #require(callback.header("Location"))
            let code = try #require(Flow.query(location)["code"])
            let session = try await Self.redeemAsCLI(client, code: code, verifier: pkce.verifier)
            #expect(session.status == 200 && session["user_id"]?.stringValue == "google:1045")
            #expect(try await broker.store.user(id: UserID(provider: "google", subject: "1045")) != nil)
        }
    }
}
