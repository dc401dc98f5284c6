import BrokerClient
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

/// The third attack review's findings (issue "Attack review, third round"), each reproduced as it was found and
/// shown closed, in process on the manual clock.
@Suite("attack review, third round")
struct AttackReviewThreeTests {
    typealias Reply = InProcessBroker.Client.Reply
    typealias OP = OpenIDProviderTests
    static let password = OP.password

    /// The claims of a JWT, unverified.
    static func claims(_ token: String?) throws -> JSONValue {
        let token = try #require(token)
        return try #require(jwtParts(token).claims)
    }

    /// The API a README reader builds: the broker's JWKS, its issuer, `aud` = `server.audience`.
    static func apiAccepts(_ token: String, broker: InProcessBroker, client: InProcessBroker.Client) async throws
        -> Bool
    {
        let jwks = try await client.get("/.well-known/jwks.json")
        let set = try JSONDecoder().decode(JWKSet.self, from: Data(jwks.body))
        var keys = JWTKeySet()
        for key in set.keys { try keys.add(try AsymmetricKey(jwk: key), kid: key.kid ?? "") }
        let verifier = JWTVerifier(
            keys: keys,
            options: .init(issuer: broker.service.tokens.issuer, audience: "broker", expectedType: "at+jwt"))
        return (try? verifier.verify(token, now: broker.clock.seconds())) != nil
    }

    static func introspect(
        _ client: InProcessBroker.Client, _ token: String, as id: String, secret: String
    ) async throws -> Reply {
        try await client.send(
            .post, "/auth/introspect",
            headers: [
                .contentType: "application/x-www-form-urlencoded",
                .authorization: HTTPBasic.header(id: id, secret: Secret(secret)).value,
            ],
            body: Array(FormEncoding.encode([("token", token)]).utf8))
    }

    /// RT3-4: an app the user allowed to know who they are got an access token with `aud` = `server.audience`,
    /// which every API, git server and registry configured per the README took as the user, and so did its
    /// refreshed tokens. An app's tokens now carry its own client id as `aud`; the CLI's keep the APIs'.
    @Test(.bug(id: "RT3-4")) func anAppsAccessTokenIsNotAnAPIToken() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            let cli = try await client.register("ada@example.com", Self.password)
            let cliAccess = try #require(cli["access_token"]?.stringValue)
            #expect(try Self.claims(cliAccess)["aud"] == "broker", "the CLI's tokens are the APIs'")
            #expect(try await Self.apiAccepts(cliAccess, broker: broker, client: client))

            let app = try await OP.signInAndRedeem(
                client, email: "ada@example.com", scope: "openid email profile offline_access")
            #expect(app.status == 200)
            let appAccess = try #require(app["access_token"]?.stringValue)
            #expect(try Self.claims(appAccess)["aud"] == "web")
            #expect(try await !Self.apiAccepts(appAccess, broker: broker, client: client), "no API takes it")
            // It still does what an app's token is for: userinfo.
            let info = try await client.get("/auth/userinfo", bearer: appAccess)
            #expect(info.status == 200 && info["email"] == "ada@example.com")

            // A refreshed one too, for the whole life of the session.
            broker.clock.advance(by: 3_600)
            let refreshed = try await OP.redeemRefresh(client, try #require(app["refresh_token"]?.stringValue))
            #expect(refreshed.status == 200)
            let next = try #require(refreshed["access_token"]?.stringValue)
            #expect(try Self.claims(next)["aud"] == "web")
            #expect(try await !Self.apiAccepts(next, broker: broker, client: client))
            #expect(try await client.get("/auth/userinfo", bearer: next).status == 200)
            // Revocation takes an app's access token as it did.
            #expect(try await client.form("/auth/revoke", [("token", next)]).status == 200)
            #expect(try await client.get("/auth/userinfo", bearer: next).status == 401, "its session has ended")
        }
    }

    /// RT3-3: with `scope=openid` the app's access token carried the email and the name, `/auth/me` answered
    /// them and `/auth/identities` listed every way in. An app's token carries what its scopes grant, and the
    /// broker's own user endpoints refuse it.
    @Test(.bug(id: "RT3-3")) func scopesLimitWhatAnAppLearns() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("grace@example.com", Self.password)
            let jar = OP.Jar()
            let bare = try await OP.signInAndRedeem(client, email: "grace@example.com", scope: "openid", jar)
            let token = try #require(bare["access_token"]?.stringValue)
            let claims = try Self.claims(token)
            #expect(claims["email"] == nil && claims["email_verified"] == nil && claims["name"] == nil)
            #expect(claims["scope"] == "openid")
            let info = try await client.get("/auth/userinfo", bearer: token)
            #expect(info.status == 200 && info["sub"] != nil && info["email"] == nil)

            for path in ["/auth/me", "/auth/identities"] {
                let refused = try await client.get(path, bearer: token)
                #expect(refused.status == 401 && refused.error == "invalid_token", "\(path)")
                #expect(refused["error_description"]?.stringValue?.contains("/auth/userinfo") == true, "\(path)")
            }

            let withEmail = try await OP.signInAndRedeem(
                client, email: "grace@example.com", scope: "openid email", OP.Jar())
            let emailClaims = try Self.claims(withEmail["access_token"]?.stringValue)
            #expect(emailClaims["email"] == "grace@example.com" && emailClaims["email_verified"] != nil)
            #expect(emailClaims["name"] == nil, "no profile scope, no name")
        }
    }

    /// RT3-6: any confidential client could introspect any token — other apps' refresh tokens and the CLI's
    /// included — without spending it. A refresh token is answered only to the client it was issued to, an
    /// access token only to a client entitled to its audience; to anyone else it is inactive.
    @Test(.bug(id: "RT3-6")) func introspectionAnswersOnlyForTokensMeantForTheAsker() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        let otherSecret = "other-secret-0123456789abcdefghijklmnopqrstu"
        try await broker.store.createApp(
            AppRecord(
                clientID: "other", secretHash: broker.service.appTokens.secrets.hash(Secret(otherSecret)),
                redirectURIs: ["https://other.example/cb"], createdAt: broker.clock.seconds()))
        let ci = try ClientSecretHasher.newSecret()
        try await broker.store.createClient(
            ClientRecord(
                name: "rs", secretHash: broker.service.clients.clientSecrets.hash(ci), scopes: [], trust: nil,
                createdAt: broker.clock.seconds()))
        try await broker.test { client in
            let cli = try await client.register("lin@example.com", Self.password)
            let cliAccess = try #require(cli["access_token"]?.stringValue)
            let cliRefresh = try #require(cli["refresh_token"]?.stringValue)
            let app = try await OP.signInAndRedeem(client, email: "lin@example.com", scope: "openid offline_access")
            let appAccess = try #require(app["access_token"]?.stringValue)
            let appRefresh = try #require(app["refresh_token"]?.stringValue)

            // The app, about its own tokens: live.
            #expect(try await Self.introspect(client, appAccess, as: "web", secret: OP.secret)["active"] == true)
            #expect(try await Self.introspect(client, appRefresh, as: "web", secret: OP.secret)["active"] == true)
            // Another app, about them, or about the CLI's: nothing.
            for token in [appAccess, appRefresh, cliAccess, cliRefresh] {
                let reply = try await Self.introspect(client, token, as: "other", secret: otherSecret)
                #expect(reply.status == 200 && reply["active"] == false && reply["sub"] == nil)
            }
            // The app about the CLI's tokens: nothing.
            for token in [cliAccess, cliRefresh] {
                #expect(try await Self.introspect(client, token, as: "web", secret: OP.secret)["active"] == false)
            }
            // An operator's resource server (a CI client): the APIs' audience, not an app's, and no refresh token.
            #expect(try await Self.introspect(client, cliAccess, as: "rs", secret: ci.exposed)["active"] == true)
            for token in [appAccess, appRefresh, cliRefresh] {
                #expect(try await Self.introspect(client, token, as: "rs", secret: ci.exposed)["active"] == false)
            }
            // Asking spent nothing: both refresh tokens still rotate.
            #expect(try await client.refresh(cliRefresh).status == 200)
            #expect(try await OP.redeemRefresh(client, appRefresh).status == 200)
        }
    }

    /// RT3-10: `broker client add broker-cli …` was accepted, and that app's sessions were taken for the CLI's
    /// (account tokens). The CLI's id and the APIs' audience are reserved; an app a store from before the rule
    /// holds under either is unknown to every endpoint.
    @Test(.bug(id: "RT3-10")) func theCLIsClientIDCannotBeAnApps() async throws {
        #expect(AppRules.isReserved("broker-cli", apiAudience: "broker"))
        #expect(AppRules.isReserved("Broker-CLI", apiAudience: "broker"))
        #expect(AppRules.isReserved("broker", apiAudience: "broker"))
        #expect(!AppRules.isReserved("web", apiAudience: "broker"))

        let broker = try await InProcessBroker()
        let secret = "planted-secret-0123456789abcdefghijklmnopqr"
        for id in ["broker-cli", "broker"] {
            try await broker.store.createApp(
                AppRecord(
                    clientID: id, secretHash: broker.service.appTokens.secrets.hash(Secret(secret)),
                    redirectURIs: ["https://evil.example/cb"], firstParty: true, createdAt: broker.clock.seconds()))
        }
        try await broker.test { client in
            for id in ["broker-cli", "broker"] {
                let page = try await client.get(
                    OP.authorizeURI([
                        ("response_type", "code"), ("client_id", id), ("redirect_uri", "https://evil.example/cb"),
                        ("scope", "openid"), ("state", "s"),
                    ]))
                #expect(page.status == 400 && page.header("Location") == nil, "\(id): no redirect to the planted app")
                let token = try await client.send(
                    .post, "/auth/token",
                    headers: [
                        .contentType: "application/x-www-form-urlencoded",
                        .authorization: HTTPBasic.header(id: id, secret: Secret(secret)).value,
                    ],
                    body: Array(
                        "grant_type=authorization_code&code=x&redirect_uri=https%3A%2F%2Fevil.example%2Fcb".utf8))
                #expect(token.status == 401 && token.error == "invalid_client", "\(id)")
            }
        }
    }

    /// Text that smuggles markup past an escaper that compares `Character`s: U+0600 (Arabic number sign, a
    /// grapheme prepend) glued before each of `" > <`, and a combining mark after `'` and `&`.
    static let graphemeMarkup =
        "\u{0600}\"\u{0600}>\u{0600}<meta http-equiv=refresh content=0;url=https://evil.example/\u{0600}>"
        + "'\u{0301}&\u{0301}"

    /// Whether `body` carries any of the five markup characters raw right after a U+0600 or before a U+0301.
    static func smuggled(_ body: [UInt8]) -> Bool {
        let markup: Set<UInt8> = [
            UInt8(ascii: "<"), UInt8(ascii: ">"), UInt8(ascii: "\""), UInt8(ascii: "'"),
            UInt8(ascii: "&"),
        ]
        for index in body.indices.dropLast(2) {
            // U+0600 is D8 80 in UTF-8; U+0301 is CC 81.
            if body[index] == 0xD8, body[index + 1] == 0x80, markup.contains(body[index + 2]) {
                // An escape's own `&` is no smuggled markup.
                let rest = body[(index + 2)...].prefix(6)
                let escaped = ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"].contains { rest.starts(with: $0.utf8) }
                if !escaped { return true }
            }
            if markup.contains(body[index]), body[index + 1] == 0xCC, body[index + 2] == 0x81 { return true }
        }
        let text = String(decoding: body, as: UTF8.self)
        return text.contains("<meta http-equiv=refresh content=0;url=https://evil")
    }

    /// RT3-1: `HTML.escape` compared `Character`s, so U+0600 glued to `<` `>` `"` `'` `&` passed them raw, and
    /// `login_hint`, an unknown `client_id`, end-session's `state` and `client_id` and `/device?user_code` put
    /// live markup (a `<meta http-equiv=refresh>` to another site) into broker's own pages.
    @Test(.bug(id: "RT3-1")) func graphemeJoinedMarkupIsEscapedInEveryReflectedParameter() async throws {
        #expect(HTML.escape("\u{0600}<") == "\u{0600}&lt;")
        #expect(HTML.escape("\u{0600}\"\u{0600}'") == "\u{0600}&quot;\u{0600}&#39;")
        #expect(HTML.escape("&\u{0301}>\u{20DD}") == "&amp;\u{0301}&gt;\u{20DD}")
        #expect(HTML.escape("plain ünïcödé 日本語 👩‍👩‍👧") == "plain ünïcödé 日本語 👩‍👩‍👧")
        #expect(!Self.smuggled(Array(HTML.escape(Self.graphemeMarkup).utf8)))
        #expect(!HTML.document(title: Self.graphemeMarkup, body: "").contains("\u{0600}<"))

        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("mo@example.com", Self.password)
            let attack = Self.graphemeMarkup
            var pages: [(String, Reply)] = []
            pages.append(
                ("login_hint", try await client.get(OP.authorizeURI(OP.webRequest(extra: [("login_hint", attack)])))))
            pages.append(
                (
                    "unknown client_id",
                    try await client.get(
                        OP.authorizeURI([("client_id", attack), ("response_type", "code"), ("scope", "openid")]))
                ))
            pages.append(("user_code", try await client.get("/device?" + FormEncoding.encode([("user_code", attack)]))))
            // End-session asks first when the hint does not name the browser's session: state and client_id
            // are on that page.
            let jar = OP.Jar()
            _ = try await OP.signInAndRedeem(client, email: "mo@example.com", scope: "openid", jar)
            pages.append(
                (
                    "end-session",
                    try await OP.get(
                        client, "/auth/end-session?" + FormEncoding.encode([("state", attack), ("client_id", attack)]),
                        jar)
                ))
            for (name, page) in pages {
                #expect(page.header("Location") == nil, "\(name)")
                #expect(!Self.smuggled(page.body), "\(name): \(String(decoding: page.body, as: UTF8.self))")
                #expect(String(decoding: page.body, as: UTF8.self).contains("&lt;meta"), "\(name) shows the text")
            }
        }
    }

    /// RT3-2: an app sign-in's provider round trip was not bound to the browser that started it: the attacker's
    /// own callback URL, opened by a victim, signed the victim's browser in to broker as the attacker, and then
    /// silently into every app. The callback now completes only in the browser with the start's cookie.
    @Test(.bug(id: "RT3-2")) func anAppSignInsCallbackCompletesOnlyInTheBrowserThatStartedIt() async throws {
        typealias Flow = InProcessBrowserFlowTests
        let broker = try await InProcessBroker(config: Flow.config)
        let google = try Flow.ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            // The attacker starts a sign-in to the app in their own browser and signs in at Google …
            let attacker = OP.Jar()
            let page = try await OP.get(client, OP.authorizeURI(OP.webRequest()), attacker)
            let onward = try await OP.post(
                client, "/auth/authorize/provider",
                [
                    ("request", try #require(OP.hidden(page, "request"))),
                    ("csrf", try #require(OP.hidden(page, "csrf"))), ("provider", "google"),
                ], attacker)
            #expect(
                onward.headers[values: .setCookie].contains {
                    $0.hasPrefix("broker_device_google=") && $0.contains("HttpOnly")
                        && $0.contains("Path=/auth/google/callback")
                }, "the browser binding")
            let query = Flow.query(try #require(OP.destination(onward)))
            google.answerTokens(subject: "6666", nonce: try #require(query["nonce"]))
            let callbackURI =
                "/auth/google/callback?"
                + FormEncoding.encode([("state", try #require(query["state"])), ("code", "provider-code")])

            // … and sends the victim the callback URL: no sign-in, no redirect into the app, no session cookie.
            let victim = OP.Jar()
            let opened = try await OP.get(client, callbackURI, victim)
            #expect(opened.status == 400 && opened.header("Location") == nil)
            #expect(String(decoding: opened.body, as: UTF8.self).contains("started in another browser"))
            #expect(victim.cookies["broker_session"] == nil)
            // A forged binding cookie is no better.
            let forged = OP.Jar()
            forged.cookies["broker_device_google"] = String(repeating: "A", count: 43)
            let withForged = try await OP.get(client, callbackURI, forged)
            #expect(withForged.status == 400 && forged.cookies["broker_session"] == nil)
            #expect(try await broker.store.user(id: UserID("google:6666")!) == nil, "nobody was created")

            // The browser that started it finishes.
            let finished = try await OP.get(client, callbackURI, attacker)
            #expect(finished.status == 302, "\(finished.header("Location") ?? "")")
            #expect(attacker.cookies["broker_session"] != nil, "\(finished.header("Location") ?? "")")
        }
    }

    /// A new user's finding: `broker sessions revoke ID` failed for ids that begin with `-` (about 1 in 64):
    /// argument-parser reads them as options. No session id the broker makes begins with `-` now.
    @Test(.bug(id: "RT3-new-user-session-ids")) func noSessionIDBeginsWithADash() async throws {
        for _ in 0..<10_000 {
            #expect(try SecureRandom.argumentSafeToken(byteCount: 16).utf8.first != UInt8(ascii: "-"))
        }
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let registered = try await client.register("dash@example.com", Self.password)
            let user = try #require(try await broker.store.user(id: UserID(registered["user_id"]!.stringValue!)!))
            var dashed = 0
            for _ in 0..<1_000 {
                let (_, id) = try await broker.service.tokens.startSessionReturningID(
                    user: user, clientID: TokenIssuer.cliClientID, scope: nil, signedInWith: .custom)
                if id.hasPrefix("-") { dashed += 1 }
                #expect(id.utf8.count == 22)
            }
            #expect(dashed == 0)
        }
    }

    /// A new user's finding: a `BROKER_URL` that is not the issuer's URL (a node's own address, an internal alias)
    /// made `broker login` fail with "the DPoP proof is for another URL (htu)". Decided: proofs name the issuer's
    /// URL (a proof for an address the broker merely answers on would let whoever runs that address replay it);
    /// the refusal says which URL it checks against and what to set.
    @Test(.bug(id: "RT3-new-user-alias-url")) func aProofForAnAliasSaysWhichURLToSet() async throws {
        let broker = try await InProcessBroker()
        let key = try AsymmetricKey.generate(.ecP256)
        try await broker.test { client in
            _ = try await client.register("alias@example.com", Self.password)
            let proof = try DPoPProof.make(
                key: key, method: "POST", url: "http://10.0.0.7:8080/auth/login", accessToken: nil, nonce: nil,
                now: broker.clock.seconds())
            let refused = try await DPoPTests.login(client, "alias@example.com", proof: proof)
            #expect(refused.status == 400 && refused.error == "invalid_dpop_proof")
            let detail = refused["error_description"]?.stringValue ?? ""
            #expect(detail.contains("http://10.0.0.7:8080/auth/login"), "\(detail)")
            #expect(detail.contains("http://broker.test/auth/login") && detail.contains("broker_url"), "\(detail)")
        }
    }

    /// RT3-7 and RT3-8 (pushed requests): `/auth/par` kept a `client_secret` sent in the form in clear, stored
    /// every pushed request verbatim, and took any number of them from anyone who knows a public app's id. Now
    /// only the authorization parameters are kept, and pushes are limited per app and per address.
    @Test(.bug(id: "RT3-7"), .bug(id: "RT3-8")) func pushedRequestsKeepNoCredentialsAndAreLimited() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        try await broker.live { client, _ in
            let request = OP.webRequest(state: "p") + [("client_secret", OP.secret), ("x_padding", "junk")]
            let pushed = try await OP.push(client, request, basic: false)
            #expect(pushed.status == 201, "\(String(decoding: pushed.body, as: UTF8.self))")
            let uri = try #require(pushed["request_uri"]?.stringValue)
            let stored = try #require(
                try await broker.store.takePushedRequest(hash: Digest.sha256(uri), now: broker.clock.seconds()))
            #expect(!stored.parameters.contains("client_secret") && !stored.parameters.contains(OP.secret))
            #expect(!stored.parameters.contains("x_padding"))
            #expect(stored.parameters.contains("state=p") && stored.parameters.contains("redirect_uri="))

            // Sixty pushes a minute from one address (this one has pushed once), then 429 and nothing stored.
            for _ in 0..<59 { #expect(try await OP.push(client, OP.webRequest()).status == 201) }
            let refused = try await OP.push(client, OP.webRequest())
            #expect(refused.status == 429 && refused.header("Retry-After") != nil)
            broker.clock.advance(by: 60)
            #expect(try await OP.push(client, OP.webRequest()).status == 201, "a minute later, again")
        }
    }

    /// The replay marker a proof would write.
    static func marker(of proof: String) throws -> String {
        let parts = proof.split(separator: ".").map(String.init)
        let header = try #require(JSONValue.parse(Base64URL.decode(parts[0]) ?? []))
        let claims = try #require(JSONValue.parse(Base64URL.decode(parts[1]) ?? []))
        let jwk = try JSONDecoder().decode(JWK.self, from: Data(try #require(header["jwk"]).serialized().utf8))
        let thumbprint = try AsymmetricKey(jwk: jwk).thumbprint()
        let jti = try #require(claims["jti"]?.stringValue)
        return "dpop:" + Base64URL.encode(Digest.sha256(thumbprint + " " + jti))
    }

    /// RT3-8 (DPoP): every proof wrote a replay row, even for a request refused anyway. A proof's `jti` is
    /// written only once the request it protects is accepted; a replay of an accepted one is still refused.
    @Test(.bug(id: "RT3-8")) func aProofIsRememberedOnlyForARequestThatWasAccepted() async throws {
        let broker = try await InProcessBroker()
        let key = try AsymmetricKey.generate(.ecP256)
        let other = try AsymmetricKey.generate(.ecP256)
        try await broker.test { client in
            _ = try await client.register("jti@example.com", Self.password)
            let now = broker.clock.seconds()
            // A refresh token that is not one: refused, nothing written.
            let wasted = try DPoPTests.proof(key, "POST", "/auth/token", at: now)
            let refused = try await DPoPTests.refresh(client, String(repeating: "A", count: 43), proof: wasted)
            #expect(refused.status == 400 && refused.error == "invalid_grant")
            #expect(try await !broker.store.isStateMarkerSpent(try Self.marker(of: wasted)))

            let signedIn = try await DPoPTests.login(
                client, "jti@example.com", proof: try DPoPTests.proof(key, "POST", "/auth/login", at: now))
            let access = try #require(signedIn["access_token"]?.stringValue)
            // A proof by another key than the token's: refused, nothing written.
            let foreign = try DPoPTests.proof(other, "GET", "/auth/me", token: access, at: now)
            #expect(try await DPoPTests.me(client, access, proof: foreign).status == 401)
            #expect(try await !broker.store.isStateMarkerSpent(try Self.marker(of: foreign)))
            // The good one is remembered, and its replay refused.
            let good = try DPoPTests.proof(key, "GET", "/auth/me", token: access, at: now)
            #expect(try await DPoPTests.me(client, access, proof: good).status == 200)
            #expect(try await broker.store.isStateMarkerSpent(try Self.marker(of: good)))
            let replayed = try await DPoPTests.me(client, access, proof: good)
            #expect(replayed.status == 401 && replayed["error_description"]?.stringValue?.contains("jti") == true)
        }
    }

    /// RT3-1 beyond the broker's pages: the CLI's loopback page (its text may come from the broker's error) and
    /// the mail's HTML (the name is the person's own words) escape grapheme-joined markup too.
    @Test(.bug(id: "RT3-1")) func theLoopbackPageAndTheMailEscapeGraphemeJoinedMarkup() throws {
        let page = LoopbackListener.page(title: Self.graphemeMarkup, message: Self.graphemeMarkup, success: false)
        #expect(!Self.smuggled(Array(page.utf8)), "\(page)")
        let (mailer, _) = try MailTests.mailer("smtp://127.0.0.1:1")
        let mail = mailer.compose(
            .reset, to: "a@example.com", name: Self.graphemeMarkup, link: "https://b/l", minutes: 30)
        #expect(!Self.smuggled(Array(mail.html.utf8)), "\(mail.html)")
    }
}
