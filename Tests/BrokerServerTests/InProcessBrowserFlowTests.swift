import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// The browser flow's state machine in process: `/start`, the provider (Google's OpenID Connect, scripted on
/// the outbound transport), `/callback`, and the `authorization_code` grant — with its windows (the pending
/// sign-in's 600 s, the one-time code's 60 s) crossed on the manual clock.
@Suite("browser sign-in in process, against a scripted provider")
struct InProcessBrowserFlowTests {
    static let issuer = "https://accounts.example"
    static let config = """
        {"providers": {"google": {"client_id": "our-client", "client_secret": "s3cret", "issuer": "\(issuer)"},
                       "custom": {"enabled": true}}}
        """
    static let redirect = "http://127.0.0.1:5555/callback"

    /// A provider that signs ID tokens with its own key and answers what Google's endpoints answer.
    struct ScriptedGoogle {
        let signer: JWTSigner
        let transport: ScriptedTransport
        let clock: ManualClock

        init(transport: ScriptedTransport, clock: ManualClock) throws {
            signer = try JWTSigner(key: try AsymmetricKey.generate(.ecP256), kid: "google-1")
            self.transport = transport
            self.clock = clock
            var jwk = try signer.key.jwk()
            jwk.kid = "google-1"
            let jwks = try #require(JSONValue.parse(Array(try JSONEncoder().encode(JWKSet(keys: [jwk])))))
            transport.onJSON(
                "GET", "\(issuer)/.well-known/openid-configuration",
                [
                    "issuer": .string(issuer), "authorization_endpoint": .string("\(issuer)/auth"),
                    "token_endpoint": .string("\(issuer)/token"), "jwks_uri": .string("\(issuer)/jwks"),
                ])
            transport.onJSON("GET", "\(issuer)/jwks", jwks)
        }

        /// The token endpoint's answer for the next exchange: an ID token for `subject` with `nonce`.
        func answerTokens(subject: String, nonce: String, extra: [String: JSONValue] = [:]) {
            let signer = signer
            let clock = clock
            transport.on("POST", "\(issuer)/token") { request in
                let form = FormEncoding.decode(String(decoding: request.body ?? [], as: UTF8.self)) ?? []
                guard form.contains(where: { $0 == ("code", "provider-code") }),
                    form.contains(where: { $0.0 == "code_verifier" })
                else { return ScriptedTransport.json(["error": "invalid_grant"], status: 400) }
                let now = clock.seconds()
                var claims: [String: JSONValue] = [
                    "iss": .string(issuer), "sub": .string(subject), "aud": "our-client", "iat": .int(now),
                    "exp": .int(now + 3600), "nonce": .string(nonce), "email": "ada@example.com",
                    "email_verified": true, "name": "Ada",
                ]
                claims.merge(extra) { $1 }
                let idToken = try signer.sign(claims: claims)
                return ScriptedTransport.json(["access_token": "at", "id_token": .string(idToken)])
            }
        }
    }

    /// The query of a URL as a dictionary.
    static func query(_ url: String) -> [String: String] {
        guard let mark = url.firstIndex(of: "?"),
            let pairs = FormEncoding.decode(String(url[url.index(after: mark)...]))
        else { return [:] }
        return Dictionary(pairs, uniquingKeysWith: { first, _ in first })
    }

    /// `/start` for a CLI with `pkce`; returns the broker's state and nonce towards the provider.
    static func start(_ client: InProcessBroker.Client, pkce: PKCE) async throws -> (state: String, nonce: String) {
        let started = try await client.get(
            "/auth/google/start?"
                + FormEncoding.encode([
                    ("redirect_uri", redirect), ("state", "cli-state"), ("code_challenge", pkce.challenge),
                    ("code_challenge_method", "S256"),
                ]))
        #expect(started.status == 302)
        let location = try #require(started.header("Location"))
        #expect(location.hasPrefix("\(issuer)/auth?"))
        let fields = query(location)
        return (try #require(fields["state"]), try #require(fields["nonce"]))
    }

    static func callback(_ client: InProcessBroker.Client, state: String) async throws -> [String: String] {
        let reply = try await client.get(
            "/auth/google/callback?" + FormEncoding.encode([("state", state), ("code", "provider-code")]))
        #expect(reply.status == 302, "\(String(describing: reply.json))")
        let location = try #require(reply.header("Location"))
        #expect(location.hasPrefix(redirect + "?"))
        return query(location)
    }

    @Test func aWholeSignInThenEveryReplayRefused() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        let google = try ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        let pkce = try PKCE.generate()
        try await broker.test { client in
            let (state, nonce) = try await Self.start(client, pkce: pkce)
            google.answerTokens(subject: "1045", nonce: nonce)
            let back = try await Self.callback(client, state: state)
            #expect(back["state"] == "cli-state" && back["iss"] == "http://broker.test")
            let code = try #require(back["code"])

            // The callback cannot be replayed, even though the provider would answer again.
            let replay = try await client.get(
                "/auth/google/callback?" + FormEncoding.encode([("state", state), ("code", "provider-code")]))
            #expect(replay.status == 400 && replay.error == "invalid_request")

            let redeem = [
                ("grant_type", "authorization_code"), ("code", code), ("code_verifier", pkce.verifier),
                ("redirect_uri", Self.redirect),
            ]
            let session = try await client.form("/auth/token", redeem)
            #expect(session.status == 200 && session["user_id"]?.stringValue == "google:1045")
            let access = try #require(session["access_token"]?.stringValue)
            #expect(try await client.get("/auth/me", bearer: access)["email"]?.stringValue == "ada@example.com")
            // A second use of the code fails and revokes the session the first one started.
            #expect(try await client.form("/auth/token", redeem).error == "invalid_grant")
            #expect(try await client.get("/auth/me", bearer: access).status == 401)
        }
        #expect(google.transport.count("POST", "\(Self.issuer)/token") == 1, "one code exchange at the provider")
    }

    @Test(arguments: [nil, 7] as [Int?])
    func everyCallToTheProviderHasTheConfiguredTimeLimit(seconds: Int?) async throws {
        // server.http_timeout: one limit for discovery, keys and the code exchange (20 s unless set).
        let config =
            seconds.map { Self.config.dropLast() + #", "server": {"http_timeout": \#($0)}}"# } ?? Self.config
        let broker = try await InProcessBroker(config: String(config))
        let google = try ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        try await broker.test { client in
            let (state, nonce) = try await Self.start(client, pkce: try PKCE.generate())
            google.answerTokens(subject: "1045", nonce: nonce)
            #expect(try await Self.callback(client, state: state)["code"] != nil)
        }
        let sent = broker.transport.sent
        #expect(Set(sent.map { $0.url.split(separator: "/").last ?? "" }) == ["openid-configuration", "jwks", "token"])
        let expected = Duration.seconds(seconds ?? 20)
        #expect(sent.allSatisfy { $0.timeout == expected && $0.connectTimeout == min(expected, .seconds(10)) })
    }

    @Test func aPendingSignInLapsesAfterTenMinutes() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        let google = try ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        try await broker.test { client in
            let (state, nonce) = try await Self.start(client, pkce: try PKCE.generate())
            google.answerTokens(subject: "1045", nonce: nonce)
            broker.clock.advance(by: 601)
            let back = try await Self.callback(client, state: state)
            #expect(back["error"] == "access_denied" && back["code"] == nil)
            #expect(back["error_description"]?.contains("too long") == true)
        }
        #expect(google.transport.count("POST", "\(Self.issuer)/token") == 0, "the provider was never asked")
        #expect(try await broker.store.user(id: UserID(provider: "google", subject: "1045")) == nil)
    }

    @Test func aCodeLapsesAfterSixtySecondsAndIsBoundToItsVerifierAndRedirect() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        let google = try ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        try await broker.test { client in
            for (change, expected) in [
                ("verifier", "code_verifier"), ("redirect", "redirect_uri"), ("late", "expired"),
            ] {
                let pkce = try PKCE.generate()
                let (state, nonce) = try await Self.start(client, pkce: pkce)
                google.answerTokens(subject: "1045", nonce: nonce)
                let code = try #require(try await Self.callback(client, state: state)["code"])
                var verifier = pkce.verifier
                var redirect = Self.redirect
                switch change {
                case "verifier": verifier = try PKCE.generate().verifier
                case "redirect": redirect = "http://127.0.0.1:5556/callback"
                default: broker.clock.advance(by: 61)
                }
                let reply = try await client.form(
                    "/auth/token",
                    [
                        ("grant_type", "authorization_code"), ("code", code), ("code_verifier", verifier),
                        ("redirect_uri", redirect),
                    ])
                #expect(reply.error == "invalid_grant", "\(change)")
                #expect(reply["error_description"]?.stringValue?.contains(expected) == true, "\(change)")
            }
        }
    }

    @Test func anIDTokenForAnotherSignInIsRefused() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        let google = try ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        try await broker.test { client in
            let (state, _) = try await Self.start(client, pkce: try PKCE.generate())
            google.answerTokens(subject: "1045", nonce: "another sign-in's nonce")
            let back = try await Self.callback(client, state: state)
            #expect(back["error"] == "server_error" && back["code"] == nil)
            #expect(back["error_description"]?.contains("nonce") == true)
        }
        #expect(try await broker.store.user(id: UserID(provider: "google", subject: "1045")) == nil)
    }

    /// A callback with a real state and a made-up code (the scripted provider refuses it).
    static func forgedCallback(_ client: InProcessBroker.Client, state: String, attempt: Int) async throws
        -> InProcessBroker.Client.Reply
    {
        try await client.get(
            "/auth/google/callback?" + FormEncoding.encode([("state", state), ("code", "made-up-\(attempt)")]))
    }

    @Test func madeUpCodesWithARealStateWriteNothing() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        let google = try ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        try await broker.test { client in
            let (state, nonce) = try await Self.start(client, pkce: try PKCE.generate())
            google.answerTokens(subject: "1045", nonce: nonce)
            // Anyone can get a sealed state from /start; made-up codes are refused by the provider.
            for attempt in 0..<3 {
                let forged = try await Self.forgedCallback(client, state: state, attempt: attempt)
                #expect(forged.status == 302 && forged.header("Location")?.contains("error=server_error") == true)
            }
            let sealed = try #require(SealedSignIn.open(state, key: broker.service.signIn.flowKey, provider: "google"))
            #expect(try await !broker.store.isStateMarkerSpent(sealed.marker), "the marker is still unspent")
            // …so the real callback still completes.
            #expect(try await Self.callback(client, state: state)["code"] != nil)
            #expect(try await broker.store.isStateMarkerSpent(sealed.marker))
        }
    }

    @Test(
        "a sealed state buys at most five provider calls",
        .bug(id: 18, "finding 11: a state could be replayed to /callback with junk codes for 10 minutes"))
    func aStatesCallbackTriesAreBounded() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        let google = try ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        try await broker.test { client in
            let (state, nonce) = try await Self.start(client, pkce: try PKCE.generate())
            google.answerTokens(subject: "1045", nonce: nonce)
            for attempt in 0..<5 {
                #expect(try await Self.forgedCallback(client, state: state, attempt: attempt).status == 302)
            }
            let sixth = try await client.get(
                "/auth/google/callback?" + FormEncoding.encode([("state", state), ("code", "provider-code")]))
            #expect(sixth.status == 400 && sixth.error == "invalid_request")
            #expect(sixth["error_description"]?.stringValue?.contains("too many attempts") == true)
        }
        #expect(google.transport.count("POST", "\(Self.issuer)/token") == 5, "five provider calls, not six")
    }
}
