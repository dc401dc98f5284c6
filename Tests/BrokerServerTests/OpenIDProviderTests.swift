import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Synchronization
import Testing

/// The OpenID Provider in process (issue "Sign in to any app"): an app's whole sign-in through the broker's
/// pages, its tokens, and the negative cases the OpenID conformance plan checks, on the manual clock.
@Suite("OpenID Provider: apps sign their users in through broker")
struct OpenIDProviderTests {
    typealias Reply = InProcessBroker.Client.Reply
    typealias Flow = InProcessBrowserFlowTests
    static let password = "correct horse battery staple"
    static let secret = "app-secret-0123456789abcdefghijklmnopqrstuvw"
    static let web = "https://app.example/callback"

    /// A confidential app `web` (and a public native app `cli-app`) registered in `broker`'s store.
    static func register(_ broker: InProcessBroker, firstParty: Bool = false, backchannelLogoutURI: String? = nil)
        async throws
    {
        try await broker.store.createApp(
            AppRecord(
                clientID: "web", secretHash: broker.service.appTokens.secrets.hash(Secret(secret)),
                redirectURIs: [web], postLogoutRedirectURIs: ["https://app.example/bye"],
                backchannelLogoutURI: backchannelLogoutURI, firstParty: firstParty, createdAt: broker.clock.seconds()))
        try await broker.store.createApp(
            AppRecord(
                clientID: "native", secretHash: nil,
                redirectURIs: ["http://127.0.0.1/callback", "com.example.app:/oauth2redirect"],
                createdAt: broker.clock.seconds()))
    }

    /// A browser's cookie jar for the in-process client: `name=value` pairs from `Set-Cookie`.
    final class Jar: @unchecked Sendable {
        var cookies: [String: String] = [:]
        func take(_ reply: Reply) {
            for field in reply.headers[values: .setCookie] {
                guard let pair = field.split(separator: ";").first, let equals = pair.firstIndex(of: "=") else {
                    continue
                }
                let name = String(pair[..<equals])
                let value = String(pair[pair.index(after: equals)...])
                if value.isEmpty || field.contains("Max-Age=0") { cookies[name] = nil } else { cookies[name] = value }
            }
        }
        var header: HTTPFields {
            cookies.isEmpty ? [:] : [.cookie: cookies.map { "\($0.key)=\($0.value)" }.joined(separator: "; ")]
        }
    }

    static func get(_ client: InProcessBroker.Client, _ uri: String, _ jar: Jar) async throws -> Reply {
        let reply = try await client.send(.get, uri, headers: jar.header)
        jar.take(reply)
        return reply
    }

    static func post(_ client: InProcessBroker.Client, _ uri: String, _ fields: [(String, String)], _ jar: Jar)
        async throws -> Reply
    {
        var headers = jar.header
        headers[.contentType] = "application/x-www-form-urlencoded"
        let reply = try await client.send(.post, uri, headers: headers, body: Array(FormEncoding.encode(fields).utf8))
        jar.take(reply)
        return reply
    }

    static func hidden(_ reply: Reply, _ name: String) -> String? { InProcessDeviceTests.hidden(reply, name) }

    /// Where a reply sends the browser: a 302's Location, or an onward page's refresh.
    static func destination(_ reply: Reply) -> String? {
        if let location = reply.header("Location") { return location }
        let html = String(decoding: reply.body, as: UTF8.self)
        guard let range = html.range(of: "content=\"0;url=") else { return nil }
        return String(html[range.upperBound...].prefix { $0 != "\"" }).replacingOccurrences(of: "&amp;", with: "&")
    }

    static func authorizeURI(_ parameters: [(String, String)]) -> String {
        "/auth/authorize?" + FormEncoding.encode(parameters)
    }

    static func webRequest(
        scope: String = "openid email profile", state: String = "st-1", nonce: String? = "n-1",
        extra: [(String, String)] = []
    ) -> [(String, String)] {
        var parameters = [
            ("response_type", "code"), ("client_id", "web"), ("redirect_uri", web), ("scope", scope),
            ("state", state),
        ]
        if let nonce { parameters.append(("nonce", nonce)) }
        return parameters + extra
    }

    /// The sign-in page's password form, submitted.
    static func passwordSignIn(_ client: InProcessBroker.Client, page: Reply, _ jar: Jar, email: String) async throws
        -> Reply
    {
        try await post(
            client, "/auth/authorize/password",
            [
                ("request", try #require(hidden(page, "request"))), ("csrf", try #require(hidden(page, "csrf"))),
                ("email", email), ("password", password),
            ], jar)
    }

    /// The first-party app `web`'s whole sign-in in `jar`'s browser: its request, the password form, the code
    /// redeemed — the token response.
    static func signInAndRedeem(
        _ client: InProcessBroker.Client, email: String, scope: String = "openid email profile", _ jar: Jar = Jar()
    ) async throws -> Reply {
        let page = try await get(client, authorizeURI(webRequest(scope: scope)), jar)
        let signedIn = try await passwordSignIn(client, page: page, jar, email: email)
        let destination = try #require(Self.destination(signedIn))
        return try await redeem(client, code: try #require(Flow.query(destination)["code"]))
    }

    static func allow(_ client: InProcessBroker.Client, consent: Reply, _ jar: Jar, decision: String = "allow")
        async throws -> Reply
    {
        try await post(
            client, "/auth/authorize/consent",
            [
                ("request", try #require(hidden(consent, "request"))), ("csrf", try #require(hidden(consent, "csrf"))),
                ("decision", decision),
            ], jar)
    }

    static func redeem(
        _ client: InProcessBroker.Client, code: String, redirect: String = web, basic: Bool = true,
        extra: [(String, String)] = []
    ) async throws -> Reply {
        var headers: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
        var fields = [("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirect)] + extra
        if basic {
            headers[.authorization] = HTTPBasic.header(id: "web", secret: Secret(secret)).value
        } else {
            fields += [("client_id", "web"), ("client_secret", secret)]
        }
        return try await client.send(
            .post, "/auth/token", headers: headers, body: Array(FormEncoding.encode(fields).utf8))
    }

    @Test func anAppSignsAUserInWithPasswordConsentAndAnIDToken() async throws {
        let broker = try await InProcessBroker()
        try await Self.register(broker)
        try await broker.test { client in
            let registered = try await client.register("ada@example.com", Self.password)
            let jar = Jar()
            // No session: the sign-in page, naming the app, with the CSRF cookie.
            let page = try await Self.get(client, Self.authorizeURI(Self.webRequest()), jar)
            #expect(page.status == 200)
            let html = String(decoding: page.body, as: UTF8.self)
            #expect(html.contains("Sign in to continue to <strong>web</strong>"))
            #expect(page.header("Content-Security-Policy")?.contains("frame-ancestors 'none'") == true)
            #expect(page.header("Referrer-Policy") == "no-referrer")

            let wrong = try await Self.post(
                client, "/auth/authorize/password",
                [
                    ("request", try #require(Self.hidden(page, "request"))),
                    ("csrf", try #require(Self.hidden(page, "csrf"))), ("email", "ada@example.com"),
                    ("password", "wrong password entirely"),
                ], jar)
            #expect(wrong.status == 401)
            #expect(String(decoding: wrong.body, as: UTF8.self).contains("Wrong email or password."))
            let forged = try await client.send(
                .post, "/auth/authorize/password", headers: [.contentType: "application/x-www-form-urlencoded"],
                body: Array(
                    FormEncoding.encode([
                        ("request", try #require(Self.hidden(page, "request"))), ("csrf", "forged"),
                        ("email", "ada@example.com"), ("password", Self.password),
                    ]).utf8))
            #expect(forged.status == 403, "no CSRF cookie, no sign-in")

            // Signed in: the consent page (the session cookie is set), then the code.
            let consent = try await Self.passwordSignIn(client, page: wrong, jar, email: "ada@example.com")
            #expect(consent.status == 200)
            #expect(jar.cookies["broker_session"] != nil)
            #expect(
                consent.headers[values: .setCookie].contains {
                    $0.hasPrefix("broker_session=") && $0.contains("HttpOnly") && $0.contains("SameSite=Lax")
                })
            let consentHTML = String(decoding: consent.body, as: UTF8.self)
            #expect(consentHTML.contains("Allow web?") && consentHTML.contains("See your email address"))
            let allowed = try await Self.allow(client, consent: consent, jar)
            let back = try #require(Self.destination(allowed))
            #expect(back.hasPrefix(Self.web + "?"))
            let query = Flow.query(back)
            #expect(query["state"] == "st-1")
            #expect(query["iss"] == "http://broker.test")
            let code = try #require(query["code"])

            let tokens = try await Self.redeem(client, code: code)
            #expect(tokens.status == 200, "\(String(decoding: tokens.body, as: UTF8.self))")
            #expect(tokens["refresh_token"] == nil, "no offline_access, no refresh token")
            #expect(tokens["scope"]?.stringValue == "openid email profile")
            let accessToken = try #require(tokens["access_token"]?.stringValue)
            let idToken = try #require(tokens["id_token"]?.stringValue)
            // The id token: RS256 against the published JWKS, and every claim Core 2 asks for.
            let jwks = try await client.get("/.well-known/jwks.json")
            let set = try JSONDecoder().decode(JWKSet.self, from: Data(jwks.body))
            var keys = JWTKeySet()
            for key in set.keys { try keys.add(try AsymmetricKey(jwk: key), kid: key.kid ?? "") }
            let verified = try JWTVerifier(
                keys: keys, options: .init(issuer: "http://broker.test", audience: "web")
            ).verify(idToken, now: broker.clock.seconds())
            #expect(verified.algorithm == .RS256)
            let userID = try #require(registered["user_id"]?.stringValue)
            #expect(verified.subject == userID)
            #expect(verified.claims["nonce"] == "n-1")
            #expect(verified.claims["azp"] == "web")
            #expect(verified.claims["email"] == "ada@example.com")
            #expect(verified.claims["amr"] == ["pwd"])
            #expect(verified.claims["auth_time"]?.intValue == broker.clock.seconds())
            #expect(verified.claims["sid"]?.stringValue?.isEmpty == false)
            #expect(verified.claims["at_hash"]?.stringValue == AppTokenService.halfHash(accessToken))
            #expect(jwtParts(accessToken).claims?["client_id"] == "web")

            // userinfo, GET and POST; an id token is no access token.
            let info = try await client.get("/auth/userinfo", bearer: accessToken)
            #expect(info.status == 200 && info["sub"]?.stringValue == userID && info["email"] == "ada@example.com")
            let posted = try await client.send(
                .post, "/auth/userinfo", headers: [.contentType: "application/x-www-form-urlencoded"],
                body: Array("access_token=\(accessToken)".utf8))
            #expect(posted.status == 200 && posted["sub"]?.stringValue == userID)
            #expect(try await client.get("/auth/userinfo", bearer: idToken).status == 401)
            #expect(
                try await client.get("/auth/userinfo", bearer: registered["access_token"]?.stringValue).status == 403)

            // Single sign-on: the session and the remembered consent answer at once, with a 302.
            let again = try await Self.get(
                client, Self.authorizeURI(Self.webRequest(state: "st-2", nonce: nil, extra: [("prompt", "none")])),
                jar)
            #expect(again.status == 302)
            #expect(Flow.query(try #require(again.header("Location")))["code"] != nil)
            // prompt=consent asks again; max_age after time has passed signs in again.
            let asked = try await Self.get(
                client, Self.authorizeURI(Self.webRequest(extra: [("prompt", "consent")])), jar)
            #expect(String(decoding: asked.body, as: UTF8.self).contains("Allow web?"))
            let zero = try await Self.get(client, Self.authorizeURI(Self.webRequest(extra: [("max_age", "0")])), jar)
            #expect(String(decoding: zero.body, as: UTF8.self).contains("Sign in to continue"), "max_age=0")
            broker.clock.advance(by: 30)
            let stale = try await Self.get(client, Self.authorizeURI(Self.webRequest(extra: [("max_age", "1")])), jar)
            #expect(String(decoding: stale.body, as: UTF8.self).contains("Sign in to continue"))
            // Without the session: prompt=none is login_required at the redirect URI.
            let none = try await client.get(Self.authorizeURI(Self.webRequest(extra: [("prompt", "none")])))
            #expect(none.status == 302)
            let refused = Flow.query(try #require(none.header("Location")))
            #expect(refused["error"] == "login_required" && refused["state"] == "st-1")

            // A code is spent once; its replay ends the session it started.
            let replay = try await Self.redeem(client, code: code)
            #expect(replay.status == 400 && replay.error == "invalid_grant")
            #expect(try await client.get("/auth/userinfo", bearer: accessToken).status == 401, "the session ended")

            // Revoking the user's sessions ends the broker's browser sign-in too: no more single sign-on.
            let user = try #require(UserID(userID))
            #expect(try await broker.store.revokeSessions(user: user, now: broker.clock.seconds()) >= 1)
            let ended = try await Self.get(
                client, Self.authorizeURI(Self.webRequest(extra: [("prompt", "none")])), jar)
            #expect(Flow.query(ended.header("Location") ?? "")["error"] == "login_required")
        }
    }

    @Test func theTokenEndpointChecksTheAppTheCodeAndTheRedirect() async throws {
        let broker = try await InProcessBroker()
        try await Self.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("bo@example.com", Self.password)
            func code(scope: String = "openid offline_access") async throws -> String {
                let jar = Jar()
                let page = try await Self.get(client, Self.authorizeURI(Self.webRequest(scope: scope)), jar)
                let signedIn = try await Self.passwordSignIn(client, page: page, jar, email: "bo@example.com")
                let destination = try #require(Self.destination(signedIn))
                return try #require(Flow.query(destination)["code"], "first-party: no consent page")
            }
            let wrongRedirect = try await Self.redeem(client, code: try await code(), redirect: "https://app.example/x")
            #expect(wrongRedirect.status == 400 && wrongRedirect.error == "invalid_grant")
            var headers: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
            headers[.authorization] = HTTPBasic.header(id: "web", secret: Secret("not the secret")).value
            let badSecret = try await client.send(
                .post, "/auth/token", headers: headers,
                body: Array(
                    FormEncoding.encode([
                        ("grant_type", "authorization_code"), ("code", try await code()), ("redirect_uri", Self.web),
                    ]).utf8))
            #expect(badSecret.status == 401 && badSecret.error == "invalid_client")
            let posted = try await Self.redeem(client, code: try await code(), basic: false)
            #expect(posted.status == 200, "client_secret_post")
            let refresh = try #require(posted["refresh_token"]?.stringValue, "offline_access: a refresh token")
            let rotated = try await Self.redeemRefresh(client, refresh)
            #expect(rotated.status == 200)
            #expect(jwtParts(try #require(rotated["access_token"]?.stringValue)).claims?["client_id"] == "web")
            // A confidential app's refresh token rotates only with the app's secret: presented without it, it is
            // taken as stolen and its session ends (RFC 6749 §6).
            let withSecret = try await Self.redeemRefresh(client, try #require(rotated["refresh_token"]?.stringValue))
            #expect(withSecret.status == 200, "with the app's secret")
            let stolen = try await client.refresh(try #require(withSecret["refresh_token"]?.stringValue))
            #expect(stolen.status == 401 && stolen.error == "invalid_client", "without it")
            let after = try await Self.redeem(client, code: try await code(), basic: true)
            let other = try await Self.redeemRefresh(
                client, try #require(after["refresh_token"]?.stringValue), secret: "wrong")
            #expect(other.status == 401, "a wrong secret is no secret")
            #expect(
                try await client.get("/auth/userinfo", bearer: after["access_token"]?.stringValue).status == 200,
                "a refused client authentication spends nothing")
            // A token of an app never becomes an account token (RT2-1), even with the app's secret.
            let account = try await Self.redeemRefresh(
                client, try #require(after["refresh_token"]?.stringValue), extra: [("scope", "account")])
            #expect(account.status == 400 && account.error == "invalid_scope")
        }
    }

    @Test func badRequestsNeverRedirectAnywhereUnchecked() async throws {
        let broker = try await InProcessBroker()
        try await Self.register(broker)
        try await broker.test { client in
            let unknown = try await client.get(
                Self.authorizeURI([("client_id", "nobody"), ("redirect_uri", "https://evil.example/")]))
            #expect(unknown.status == 400 && unknown.header("Location") == nil)
            let unregistered = try await client.get(
                Self.authorizeURI([
                    ("client_id", "web"), ("redirect_uri", "https://evil.example/callback"), ("response_type", "code"),
                ]))
            #expect(unregistered.status == 400 && unregistered.header("Location") == nil)
            #expect(String(decoding: unregistered.body, as: UTF8.self).contains("not one it registered"))
            let prefix = try await client.get(
                Self.authorizeURI([("client_id", "web"), ("redirect_uri", Self.web + "/more")]))
            #expect(prefix.status == 400, "exact match only")

            func error(_ parameters: [(String, String)]) async throws -> [String: String] {
                let reply = try await client.get(Self.authorizeURI(parameters))
                #expect(reply.status == 302)
                return Flow.query(reply.header("Location") ?? "")
            }
            var missing = Self.webRequest()
            missing.removeAll { $0.0 == "response_type" }
            let noType = try await error(missing)
            #expect(noType["error"] == "invalid_request" && noType["state"] == "st-1")
            #expect(noType["iss"] == "http://broker.test")
            #expect(
                try await error(Self.webRequest().map { $0.0 == "response_type" ? ($0.0, "token") : $0 })["error"]
                    == "unsupported_response_type")
            #expect(
                try await error(Self.webRequest(extra: [("prompt", "none login")]))["error"] == "invalid_request")
            // Scopes in another order, unknown scopes and unknown parameters are fine: the sign-in page
            // (oidcc-ensure-other-scope-order-succeeds, oidcc-ensure-request-with-unknown-parameter-succeeds).
            let fine = try await client.get(
                Self.authorizeURI(Self.webRequest(scope: "email openid admin", extra: [("frobnicate", "1")])))
            #expect(fine.status == 200)
            // A request object that cannot be used goes back to the app as what is wrong with it (Core 6): one
            // broker cannot fetch, one that is not https, one that is not a JWT. (CertifiableTests has the ones
            // that are used.)
            #expect(
                try await error(Self.webRequest(extra: [("request_uri", "https://app.example/request.jwt")]))["error"]
                    == "invalid_request_uri")
            #expect(
                try await error(Self.webRequest(extra: [("request_uri", "http://app.example/request.jwt")]))["error"]
                    == "invalid_request_uri")
            #expect(
                try await error(Self.webRequest(extra: [("request", "not-a-jwt")]))["error"] == "invalid_request_object"
            )
            // A malformed claims parameter is the app's error, at its redirect URI.
            let badClaims = try await error(Self.webRequest(extra: [("claims", "{\"id_token\": [1]}")]))
            #expect(
                badClaims["error"] == "invalid_request" && badClaims["error_description"]?.contains("id_token") == true)
            #expect(try await error(Self.webRequest(extra: [("claims", "not json")]))["error"] == "invalid_request")

            // A public app must use PKCE; its loopback redirect may use any port (RFC 8252 §7.3).
            let native = [
                ("response_type", "code"), ("client_id", "native"), ("redirect_uri", "http://127.0.0.1:49152/callback"),
                ("scope", "openid"), ("state", "s"),
            ]
            #expect(try await error(native)["error"] == "invalid_request")
            let pkce = try PKCE.generate()
            let withPKCE = try await client.get(
                Self.authorizeURI(native + [("code_challenge", pkce.challenge), ("code_challenge_method", "S256")]))
            #expect(withPKCE.status == 200)
            let otherHost = try await client.get(
                Self.authorizeURI([
                    ("response_type", "code"), ("client_id", "native"), ("redirect_uri", "http://localhost:1/callback"),
                ]))
            #expect(otherHost.status == 400)
            #expect(AppRules.registrationProblem("http://app.example/cb", isPublic: false) != nil, "https required")
            #expect(AppRules.registrationProblem("http://localhost:8080/cb", isPublic: false) == nil)
            #expect(AppRules.registrationProblem("com.example.app:/cb", isPublic: false) != nil, "native: --public")
            #expect(AppRules.registrationProblem("com.example.app:/cb", isPublic: true) == nil)
            #expect(AppRules.registrationProblem("https://app.example/cb#x", isPublic: false) != nil)
            #expect(AppRules.registrationProblem("javascript:alert(1)", isPublic: true) != nil)
        }
    }

    /// The provider chosen on the sign-in page cannot be reached (its discovery refused): the sign-in page again,
    /// saying so, with the other ways in.
    @Test func anUnreachableProviderShowsTheSignInPageAgain() async throws {
        let broker = try await InProcessBroker(config: Flow.config)
        try await Self.register(broker, firstParty: true)
        try await broker.test { client in
            let jar = Jar()
            let page = try await Self.get(client, Self.authorizeURI(Self.webRequest()), jar)
            let answer = try await Self.post(
                client, "/auth/authorize/provider",
                [
                    ("request", try #require(Self.hidden(page, "request"))),
                    ("csrf", try #require(Self.hidden(page, "csrf"))), ("provider", "google"),
                ], jar)
            #expect(answer.status == 503)
            let html = String(decoding: answer.body, as: UTF8.self)
            #expect(html.contains("Google cannot be reached right now"), "\(html)")
            #expect(html.contains("action=\"/auth/authorize/password\""), "the other ways in are offered")
        }
    }

    @Test func aProviderSignInReturnsIntoTheAppsRequest() async throws {
        let broker = try await InProcessBroker(config: Flow.config)
        let google = try Flow.ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        try await Self.register(broker, firstParty: true)
        try await broker.test { client in
            let jar = Jar()
            let page = try await Self.get(client, Self.authorizeURI(Self.webRequest()), jar)
            #expect(String(decoding: page.body, as: UTF8.self).contains("Sign in with Google"))
            let onward = try await Self.post(
                client, "/auth/authorize/provider",
                [
                    ("request", try #require(Self.hidden(page, "request"))),
                    ("csrf", try #require(Self.hidden(page, "csrf"))), ("provider", "google"),
                ], jar)
            let location = try #require(Self.destination(onward))
            #expect(location.hasPrefix(Flow.issuer + "/auth?"))
            let query = Flow.query(location)
            // The provider's other standard claims: kept as the user's profile and passed on under `profile`; a
            // picture that is not https, and a claim that is not a standard one, are not.
            google.answerTokens(
                subject: "1045", nonce: try #require(query["nonce"]),
                extra: [
                    "given_name": "Ada", "family_name": "Lovelace", "locale": "en-GB",
                    "picture": "http://p.example/a.png",
                    "hd": "example.com",
                ])
            let callback = try await Self.get(
                client,
                "/auth/google/callback?"
                    + FormEncoding.encode([("state", try #require(query["state"])), ("code", "provider-code")]), jar)
            #expect(callback.status == 302)
            let back = Flow.query(try #require(callback.header("Location")))
            #expect(back["state"] == "st-1")
            let tokens = try await Self.redeem(client, code: try #require(back["code"]))
            let claims = jwtParts(try #require(tokens["id_token"]?.stringValue)).claims
            #expect(claims?["sub"] == "google:1045")
            #expect(claims?["amr"] == nil, "no RFC 8176 method says a provider's word")
            #expect(claims?["acr"] == "1" && claims?["idp"] == "google")
            #expect(
                claims?["given_name"] == "Ada" && claims?["family_name"] == "Lovelace" && claims?["locale"] == "en-GB")
            #expect(claims?["picture"] == nil && claims?["hd"] == nil)
            #expect(claims?["updated_at"]?.intValue == broker.clock.seconds(), "the profile arrived now")
            let info = try await client.get("/auth/userinfo", bearer: tokens["access_token"]?.stringValue)
            #expect(info["given_name"] == "Ada" && info["updated_at"]?.intValue == broker.clock.seconds())
            let profile = try await broker.store.userProfile(id: try #require(UserID("google:1045")))
            #expect(profile?.claims == ["given_name": "Ada", "family_name": "Lovelace", "locale": "en-GB"])
            #expect(jar.cookies["broker_session"] != nil, "signed in at the broker for the next app")
        }
    }

    /// `broker keys rotate` rotates the id-token key with the ring: the new one signs, the previous stays in the
    /// JWKS, and a broker picks the change up at its next maintenance tick.
    @Test func theIDTokenKeyRotatesAndThePreviousOneStaysPublished() async throws {
        let broker = try await InProcessBroker()
        try await Self.register(broker, firstParty: true)
        let before = try #require(try broker.service.keys.current.idTokenKeys.first?.thumbprint())
        let vault = try #require(broker.service.keys.idTokenVault)
        let rotated = try await vault.rotateIDTokenKey(now: broker.clock.seconds()).keys
        #expect(try rotated.count == 2 && rotated[1].thumbprint() == before)
        await broker.service.maintain()
        let after = try rotated[0].thumbprint()
        try await broker.test { client in
            _ = try await client.register("kid@example.com", Self.password)
            let jwks = try await client.get("/.well-known/jwks.json")
            let kids = jwks["keys"]?.arrayValue?.compactMap { $0["kid"]?.stringValue } ?? []
            #expect(Array(kids.suffix(2)) == [after, before])
            let tokens = try await Self.signInAndRedeem(client, email: "kid@example.com")
            #expect(jwtParts(try #require(tokens["id_token"]?.stringValue)).header?["kid"]?.stringValue == after)
        }
    }

    /// oidcc-server-rotate-keys, and Core 10.1.1's advice: `broker keys rotate` publishes the new id-token key at
    /// once and signs with it only later, so an app that fetched the JWKS after the rotation has it before it
    /// meets it; the old key stays published, and id tokens verify across the rotation. A second rotation while
    /// a key waits drops the waiting one (it never signed) and keeps the signing one.
    @Test func aNewIDTokenKeyIsPublishedBeforeItSigns() async throws {
        let broker = try await InProcessBroker()
        try await Self.register(broker, firstParty: true)
        let old = try #require(try broker.service.keys.current.idTokenKeys.first?.thumbprint())
        let vault = try #require(broker.service.keys.idTokenVault)
        try await broker.test { client in
            _ = try await client.register("rot@example.com", Self.password)
            func kids() async throws -> [String] {
                try await client.get("/.well-known/jwks.json")["keys"]?.arrayValue?.compactMap {
                    $0["kid"]?.stringValue
                } ?? []
            }
            func signer() async throws -> String? {
                let tokens = try await Self.signInAndRedeem(client, email: "rot@example.com")
                return jwtParts(try #require(tokens["id_token"]?.stringValue)).header?["kid"]?.stringValue
            }
            let staged = try await vault.rotateIDTokenKey(now: broker.clock.seconds(), activateIn: 3600)
            let new = try staged.keys[0].thumbprint()
            await broker.service.maintain()
            #expect(try await kids().suffix(2) == [new, old], "published at once, beside the old one")
            #expect(try await signer() == old, "the old key signs until the new one's time")
            // A second rotation while one waits: the waiting key goes, the signing one stays.
            let again = try await vault.rotateIDTokenKey(now: broker.clock.seconds(), activateIn: 3600)
            #expect(try again.keys.count == 2 && again.keys[1].thumbprint() == old)
            let newer = try again.keys[0].thumbprint()
            await broker.service.maintain()
            #expect(try await !kids().contains(new))
            broker.clock.advance(by: 3601)
            await broker.service.maintain()
            let signedAfter = try await signer()
            #expect(signedAfter == newer, "its time came: the new key signs")
            #expect(try await kids().suffix(2) == [newer, old], "the old one still verifies what it signed")
        }
    }

    /// The sign-in page's links: a new account (registration's rules, then on into the app) and a forgotten
    /// password (the mailed link), both plain forms with their CSRF token.
    @Test func theSignInPageRegistersAndResetsAsPagesToo() async throws {
        let sink = try await SMTPSink.start()
        let broker = try await PasswordRecoveryTests.broker(sink)
        try await Self.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("taken@example.com", Self.password)
            let jar = Jar()
            let page = try await Self.get(client, Self.authorizeURI(Self.webRequest()), jar)
            let html = String(decoding: page.body, as: UTF8.self)
            #expect(html.contains("Forgot your password or lost your passkey?"))
            let query = try #require(
                html.range(of: "href=\"/auth/authorize/register?").map {
                    String(html[$0.upperBound...].prefix { $0 != "\"" })
                })
            let form = try await Self.get(client, "/auth/authorize/register?" + query, jar)
            #expect(String(decoding: form.body, as: UTF8.self).contains("Create an account to continue to"))
            // Each answer with a problem is the form again, with a fresh CSRF token.
            func submit(_ page: Reply, _ email: String, _ password: String) async throws -> Reply {
                try await Self.post(
                    client, "/auth/authorize/register",
                    [
                        ("request", try #require(Self.hidden(page, "request"))),
                        ("csrf", try #require(Self.hidden(page, "csrf"))), ("email", email), ("password", password),
                    ], jar)
            }
            let weak = try await submit(form, "new@example.com", "short")
            #expect(weak.status == 400 && String(decoding: weak.body, as: UTF8.self).contains("at least"))
            let taken = try await submit(weak, "taken@example.com", Self.password)
            #expect(taken.status == 409 && String(decoding: taken.body, as: UTF8.self).contains("uses this address"))
            let created = try await submit(taken, "new@example.com", Self.password)
            let back = try #require(Self.destination(created), "first-party: straight back to the app")
            #expect(Flow.query(back)["code"] != nil && jar.cookies["broker_session"] != nil)
            #expect(try await client.login("new@example.com", Self.password).status == 200)

            // The forgot-password page mails the reset link.
            let forgot = try await Self.get(client, "/auth/password/forgot", jar)
            #expect(forgot.status == 200)
            let sent = try await Self.post(
                client, "/auth/password/forgot",
                [("csrf", try #require(Self.hidden(forgot, "csrf"))), ("email", "new@example.com")], jar)
            #expect(sent.status == 200 && String(decoding: sent.body, as: UTF8.self).contains("Check your mail"))
            await broker.service.mailer?.flush()
            #expect(try PasswordRecoveryTests.mailedToken(sink, to: "new@example.com") != nil)
            let forged = try await client.send(
                .post, "/auth/password/forgot", headers: [.contentType: "application/x-www-form-urlencoded"],
                body: Array("csrf=forged&email=new%40example.com".utf8))
            #expect(forged.status == 403)
        }
    }

    /// RFC 7662: a confidential client asks whether a token is live; anyone else is 401, and a token that is not
    /// live is only `active: false`.
    @Test func confidentialClientsIntrospectTokens() async throws {
        let broker = try await InProcessBroker()
        try await Self.register(broker, firstParty: true)
        try await broker.test { client in
            let cli = try await client.register("in@example.com", Self.password)
            let tokens = try await Self.signInAndRedeem(client, email: "in@example.com", scope: "openid offline_access")
            let access = try #require(tokens["access_token"]?.stringValue)
            let refresh = try #require(tokens["refresh_token"]?.stringValue)

            func introspect(_ token: String, as id: String? = "web", secret: String? = Self.secret) async throws
                -> Reply
            {
                var headers: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
                if let id, let secret {
                    headers[.authorization] = HTTPBasic.header(id: id, secret: Secret(secret)).value
                }
                return try await client.send(
                    .post, "/auth/introspect", headers: headers,
                    body: Array(FormEncoding.encode([("token", token)]).utf8))
            }
            let live = try await introspect(access)
            #expect(live.status == 200 && live["active"] == true)
            #expect(live["client_id"] == "web" && live["scope"] == "openid offline_access")
            #expect(live["token_type"] == "Bearer" && live["exp"]?.intValue != nil && live["sub"] != nil)
            let liveRefresh = try await introspect(refresh)
            #expect(liveRefresh["active"] == true && liveRefresh["token_type"] == "refresh_token")
            #expect(liveRefresh["sub"] == live["sub"])
            #expect(try await introspect("").status == 400, "no token is a malformed request")
            for garbage in ["x", String(repeating: "A", count: 43), access + "x", ".", "a.b.c"] {
                let reply = try await introspect(garbage)
                #expect(reply.status == 200 && reply["active"] == false && reply["sub"] == nil, "\(garbage)")
            }
            #expect(try await introspect(access, as: nil, secret: nil).status == 401, "no client authentication")
            #expect(try await introspect(access, secret: "wrong").status == 401)
            #expect(try await introspect(access, as: "native", secret: "").status == 401, "a public app may not ask")

            // A CI client with a secret (an operator's resource server) may ask too, about the APIs' tokens; an
            // app's token is not one of them (RT3-6).
            let ci = try ClientSecretHasher.newSecret()
            try await broker.store.createClient(
                ClientRecord(
                    name: "rs", secretHash: broker.service.clients.clientSecrets.hash(ci), scopes: [], trust: nil,
                    createdAt: broker.clock.seconds()))
            #expect(try await introspect(access, as: "rs", secret: ci.exposed)["active"] == false)
            let cliAccess = try #require(cli["access_token"]?.stringValue)
            #expect(try await introspect(cliAccess, as: "rs", secret: ci.exposed)["active"] == true)

            // Revoked: the session's access and refresh tokens are no longer active.
            let revoked = try await client.form("/auth/revoke", [("token", refresh)])
            #expect(revoked.status == 200)
            #expect(try await introspect(access)["active"] == false)
            #expect(try await introspect(refresh)["active"] == false)
        }
    }

    /// RP-initiated logout: with a hint naming this browser session, at once; without one, only once the person
    /// says yes; never to an unregistered address.
    @Test func endSessionSignsOutOfBrokerAndTheAppsSessions() async throws {
        let broker = try await InProcessBroker()
        try await Self.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("out@example.com", Self.password)
            func signIn(_ jar: Jar) async throws -> Reply {
                try await Self.signInAndRedeem(client, email: "out@example.com", scope: "openid offline_access", jar)
            }
            let jar = Jar()
            let tokens = try await signIn(jar)
            let idToken = try #require(tokens["id_token"]?.stringValue)
            let refresh = try #require(tokens["refresh_token"]?.stringValue)

            let elsewhere = try await Self.get(
                client,
                "/auth/end-session?"
                    + FormEncoding.encode([
                        ("id_token_hint", idToken), ("post_logout_redirect_uri", "https://evil.example/"),
                    ]), jar)
            #expect(elsewhere.status == 400 && elsewhere.header("Location") == nil)
            #expect(jar.cookies["broker_session"] != nil, "nothing ended")

            let out = try await Self.get(
                client,
                "/auth/end-session?"
                    + FormEncoding.encode([
                        ("id_token_hint", idToken), ("post_logout_redirect_uri", "https://app.example/bye"),
                        ("state", "s-9"),
                    ]), jar)
            #expect(out.status == 302 && out.header("Location") == "https://app.example/bye?state=s-9")
            #expect(jar.cookies["broker_session"] == nil, "the cookie is cleared")
            let refreshed = try await Self.redeemRefresh(client, refresh)
            #expect(refreshed.status == 400 && refreshed.error == "invalid_grant", "the app's session ended")
            let none = try await client.get(Self.authorizeURI(Self.webRequest(extra: [("prompt", "none")])))
            #expect(Flow.query(none.header("Location") ?? "")["error"] == "login_required")

            // Without a hint: a page asks first; a cross-site link alone signs nobody out.
            let again = Jar()
            let second = try await signIn(again)
            let asked = try await Self.get(
                client, "/auth/end-session?" + FormEncoding.encode([("client_id", "web")]), again)
            #expect(asked.status == 200 && String(decoding: asked.body, as: UTF8.self).contains("Sign out of broker?"))
            #expect(
                try await Self.redeemRefresh(client, try #require(second["refresh_token"]?.stringValue)).status == 200)
            let confirmed = try await Self.post(
                client, "/auth/end-session/confirm",
                [("csrf", try #require(Self.hidden(asked, "csrf"))), ("client_id", "web")], again)
            #expect(confirmed.status == 200 && String(decoding: confirmed.body, as: UTF8.self).contains("signed out"))
            #expect(again.cookies["broker_session"] == nil)
        }
    }

    /// A refresh of the app `web`'s token, with its secret.
    static func redeemRefresh(
        _ client: InProcessBroker.Client, _ token: String, secret: String = secret, extra: [(String, String)] = []
    ) async throws -> Reply {
        try await client.send(
            .post, "/auth/token",
            headers: [
                .contentType: "application/x-www-form-urlencoded",
                .authorization: HTTPBasic.header(id: "web", secret: Secret(secret)).value,
            ],
            body: Array(
                FormEncoding.encode([("grant_type", "refresh_token"), ("refresh_token", token)] + extra).utf8))
    }

    /// Back-channel logout 1.0: ending the browser session queues a signed logout token for each app that signed in
    /// through it; a failed POST is retried after the back-off, a delivered one is not sent again, and the token
    /// verifies against the JWKS with every claim §2.4 asks for (and no nonce).
    @Test func endingTheBrowserSessionPostsALogoutTokenToTheAppUntilItTakesIt() async throws {
        let broker = try await InProcessBroker()
        let hook = "https://app.example/backchannel"
        try await Self.register(broker, firstParty: true, backchannelLogoutURI: hook)
        broker.transport.on(
            "POST", hook, { _ in HTTPClientResponse(status: 503, headers: [], body: []) },
            { _ in HTTPClientResponse(status: 200, headers: [], body: []) })
        try await broker.test { client in
            let registered = try await client.register("bc@example.com", Self.password)
            let jar = Jar()
            let tokens = try await Self.signInAndRedeem(client, email: "bc@example.com", jar)
            let idToken = try #require(tokens["id_token"]?.stringValue)
            #expect(await broker.service.backchannel.deliverDue() == 0, "nothing ended yet")
            #expect(broker.transport.count("POST", hook) == 0)

            let out = try await Self.get(
                client, "/auth/end-session?" + FormEncoding.encode([("id_token_hint", idToken)]), jar)
            #expect(out.status == 200)
            #expect(await broker.service.backchannel.deliverDue() == 0, "the app answered 503")
            #expect(broker.transport.count("POST", hook) == 1)
            #expect(await broker.service.backchannel.deliverDue() == 0, "not before the back-off")
            #expect(broker.transport.count("POST", hook) == 1)
            broker.clock.advance(by: Double(BackchannelLogout.backoff(afterAttempts: 1)))
            #expect(await broker.service.backchannel.deliverDue() == 1)
            #expect(broker.transport.count("POST", hook) == 2)
            broker.clock.advance(by: 3600)
            #expect(await broker.service.backchannel.deliverDue() == 0, "delivered once, never again")
            #expect(try await broker.store.pendingLogoutDeliveries() == 0)

            let sent = try #require(broker.transport.sent.last)
            #expect(
                sent.headers.contains { $0.name == "Content-Type" && $0.value == "application/x-www-form-urlencoded" })
            let decoded = FormEncoding.decode(String(decoding: sent.body ?? [], as: UTF8.self))
            let form = try #require(decoded)
            let field = form.first { $0.0 == "logout_token" }
            let logoutToken = try #require(field?.1)
            let jwks = try await client.get("/.well-known/jwks.json")
            let set = try JSONDecoder().decode(JWKSet.self, from: Data(jwks.body))
            var keys = JWTKeySet()
            for key in set.keys { try keys.add(try AsymmetricKey(jwk: key), kid: key.kid ?? "") }
            let verified = try JWTVerifier(
                keys: keys, options: .init(issuer: "http://broker.test", audience: "web", expectedType: "logout+jwt")
            ).verify(logoutToken, now: broker.clock.seconds() - 3600)
            let hint = try JWTVerifier(keys: keys, options: .init(issuer: "http://broker.test", audience: "web"))
                .verify(idToken, now: broker.clock.seconds() - 3605)
            #expect(verified.subject == registered["user_id"]?.stringValue)
            #expect(verified.claims["sid"] == hint.claims["sid"] && verified.claims["sid"] != nil)
            #expect(verified.claims["events"]?[BackchannelLogout.event]?.objectValue?.isEmpty == true)
            #expect(verified.claims["nonce"] == nil && verified.claims["jti"]?.stringValue != nil)
            #expect(verified.claims["iat"] != nil && verified.claims["exp"] != nil)
            let metrics = String(decoding: broker.service.exposition.bytes(), as: UTF8.self)
            #expect(metrics.contains("broker_backchannel_logouts_total{outcome=\"delivered\"} 1"))
            #expect(metrics.contains("broker_backchannel_logouts_total{outcome=\"retried\"} 1"))
        }
    }

    /// A receiver that never answers is given up after ``LogoutDelivery/retryFor``, counted and audited as such.
    @Test func aLogoutNobodyTakesIsGivenUpAfterTheRetryWindow() async throws {
        let broker = try await InProcessBroker()
        let hook = "https://app.example/backchannel"
        try await Self.register(broker, firstParty: true, backchannelLogoutURI: hook)
        broker.transport.on("POST", hook, ScriptedTransport.failure(.connectionFailed, "refused"))
        try await broker.test { client in
            let registered = try await client.register("gone@example.com", Self.password)
            _ = try await Self.signInAndRedeem(client, email: "gone@example.com")
            let userText = try #require(registered["user_id"]?.stringValue)
            let user = try #require(UserID(userText))
            _ = try await broker.store.revokeSessions(user: user, now: broker.clock.seconds())
            var attempts = 0
            while try await broker.store.pendingLogoutDeliveries() > 0 {
                await broker.service.backchannel.deliverDue()
                attempts += 1
                broker.clock.advance(by: 600)
                try #require(attempts < 20, "given up within the window")
            }
            #expect(broker.transport.count("POST", hook) >= 6, "retried with back-off for an hour")
            let metrics = String(decoding: broker.service.exposition.bytes(), as: UTF8.self)
            #expect(metrics.contains("broker_backchannel_logouts_total{outcome=\"given_up\"} 1"))
        }
    }

    static func push(_ client: InProcessBroker.Client, _ fields: [(String, String)], basic: Bool = true) async throws
        -> Reply
    {
        var headers: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
        if basic { headers[.authorization] = HTTPBasic.header(id: "web", secret: Secret(secret)).value }
        return try await client.send(
            .post, "/auth/par", headers: headers, body: Array(FormEncoding.encode(fields).utf8))
    }

    /// Pushed authorization requests (RFC 9126): client-authenticated and checked when pushed; the browser
    /// carries only the `request_uri`, which works once, for its app, for 60 s; an app (or the server) can
    /// require them.
    @Test func aPushedRequestIsCheckedWhenPushedAndRedeemedOnceForItsApp() async throws {
        let broker = try await InProcessBroker()
        try await Self.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("par@example.com", Self.password)
            let request = Self.webRequest(state: "pushed-state")
            #expect(try await Self.push(client, request, basic: false).status == 401, "unauthenticated")
            let wrongSecret = try await client.send(
                .post, "/auth/par",
                headers: [
                    .contentType: "application/x-www-form-urlencoded",
                    .authorization: HTTPBasic.header(id: "web", secret: Secret("wrong")).value,
                ], body: Array(FormEncoding.encode(request).utf8))
            #expect(wrongSecret.status == 401 && wrongSecret.error == "invalid_client")
            let badRedirect = try await Self.push(
                client, request.map { $0.0 == "redirect_uri" ? ($0.0, "https://evil.example/") : $0 })
            #expect(badRedirect.status == 400 && badRedirect.error == "invalid_request")
            let badScope = try await Self.push(
                client, request.map { $0.0 == "scope" ? ($0.0, "openid admin") : $0 })
            #expect(badScope.status == 201, "a scope broker does not know is ignored, when pushed too")
            let nested = try await Self.push(client, request + [("request_uri", "urn:x")])
            #expect(nested.status == 400 && nested.error == "invalid_request")
            let otherApp = try await Self.push(client, request.map { $0.0 == "client_id" ? ($0.0, "native") : $0 })
            #expect(otherApp.status == 401 && otherApp.error == "invalid_client", "client_id must be the app's own")

            let pushed = try await Self.push(client, request)
            #expect(pushed.status == 201 && pushed["expires_in"]?.intValue == 60)
            #expect(pushed.header("Cache-Control") == "no-store")
            let requestURI = try #require(pushed["request_uri"]?.stringValue)
            #expect(requestURI.hasPrefix("urn:ietf:params:oauth:request_uri:"))

            let jar = Jar()
            let uri = Self.authorizeURI([("client_id", "web"), ("request_uri", requestURI)])
            let page = try await Self.get(client, uri, jar)
            #expect(page.status == 200, "the pushed request is the request")
            let signedIn = try await Self.passwordSignIn(client, page: page, jar, email: "par@example.com")
            let back = try #require(Self.destination(signedIn))
            #expect(Flow.query(back)["state"] == "pushed-state" && back.hasPrefix(Self.web))
            let tokens = try await Self.redeem(client, code: try #require(Flow.query(back)["code"]))
            #expect(tokens.status == 200 && tokens["id_token"] != nil)

            let again = try await Self.get(client, uri, Jar())
            #expect(again.status == 400 && again.header("Location") == nil, "used once")
            #expect(String(decoding: again.body, as: UTF8.self).contains("already used"))

            let late = try #require(try await Self.push(client, request)["request_uri"]?.stringValue)
            broker.clock.advance(by: 60)
            #expect(
                try await client.get(Self.authorizeURI([("client_id", "web"), ("request_uri", late)])).status == 400,
                "expired after 60 s")

            let stolen = try #require(try await Self.push(client, request)["request_uri"]?.stringValue)
            let asOther = try await client.get(
                Self.authorizeURI([("client_id", "native"), ("request_uri", stolen)]))
            #expect(asOther.status == 400, "another app cannot redeem it")
            let forged = try await client.get(
                Self.authorizeURI([("client_id", "web"), ("request_uri", "urn:ietf:params:oauth:request_uri:nope")]))
            #expect(forged.status == 400)
        }
    }

    @Test func anAppOrTheServerCanRequirePushedRequests() async throws {
        let broker = try await InProcessBroker()
        try await broker.store.createApp(
            AppRecord(
                clientID: "web", secretHash: broker.service.appTokens.secrets.hash(Secret(Self.secret)),
                redirectURIs: [Self.web], createdAt: broker.clock.seconds(), requirePAR: true))
        try await broker.store.createApp(
            AppRecord(
                clientID: "other", secretHash: nil, redirectURIs: ["http://127.0.0.1/cb"],
                createdAt: broker.clock.seconds()))
        try await broker.test { client in
            let direct = try await client.get(Self.authorizeURI(Self.webRequest()))
            #expect(direct.status == 400 && direct.header("Location") == nil)
            #expect(String(decoding: direct.body, as: UTF8.self).contains("/auth/par"))
            let pushed = try #require(try await Self.push(client, Self.webRequest())["request_uri"]?.stringValue)
            let page = try await client.get(Self.authorizeURI([("client_id", "web"), ("request_uri", pushed)]))
            #expect(page.status == 200)
            let discovery = try await client.get("/.well-known/openid-configuration")
            #expect(discovery["require_pushed_authorization_requests"] == false)
            #expect(discovery["pushed_authorization_request_endpoint"]?.stringValue == "http://broker.test/auth/par")
            #expect(discovery["backchannel_logout_supported"] == true)
        }

        let strict = try await InProcessBroker(config: #"{"server": {"require_par": true}}"#)
        try await strict.store.createApp(
            AppRecord(
                clientID: "other", secretHash: nil, redirectURIs: ["http://127.0.0.1/cb"],
                createdAt: strict.clock.seconds()))
        try await strict.test { client in
            let direct = try await client.get(
                Self.authorizeURI([
                    ("response_type", "code"), ("client_id", "other"), ("redirect_uri", "http://127.0.0.1/cb"),
                    ("scope", "openid"), ("code_challenge", String(repeating: "a", count: 43)),
                    ("code_challenge_method", "S256"),
                ]))
            #expect(direct.status == 400, "server.require_par: every app pushes")
            let discovery = try await client.get("/.well-known/openid-configuration")
            #expect(discovery["require_pushed_authorization_requests"] == true)
        }
    }

    /// The sender's wait between passes really waits, every time (a wait that returned at once after the first
    /// timeout made the sender a busy loop on the store), and a kick ends it early: one queued before the wait,
    /// or one that comes while the sender sleeps. The waits are recorded; a wait meant to be ended by a kick
    /// sleeps until it is cancelled, so only the kick can end it.
    @Test(.timeLimit(.minutes(1))) func theLogoutSendersWaitWaitsEveryTimeAndAKickEndsIt() async throws {
        let broker = try await InProcessBroker()
        let waits = Mutex<[Duration]>([])
        let blocking = Mutex(false)
        let (started, startedContinuation) = AsyncStream<Duration>.makeStream()
        let service = broker.service
        let sender = BackchannelLogout(
            context: service.backchannel.context, http: { [transport = broker.transport] in transport },
            pause: { slice in
                waits.withLock { $0.append(slice) }
                startedContinuation.yield(slice)
                if blocking.withLock({ $0 }) {
                    // Until cancelled, and no timer: a stream nothing is sent on ends when its task is cancelled.
                    let (never, continuation) = AsyncStream<Void>.makeStream()
                    for await _ in never {}
                    continuation.finish()
                }
            })
        for round in 0..<3 {
            waits.withLock { $0.removeAll() }
            await sender.waitForWork(upTo: .seconds(1))
            #expect(waits.withLock { $0 } == [.seconds(1)], "round \(round) waited its whole time")
        }
        blocking.withLock { $0 = true }
        waits.withLock { $0.removeAll() }
        sender.kick()
        await sender.waitForWork(upTo: .seconds(600))
        #expect(waits.withLock { $0 }.isEmpty, "a kick queued before the wait ends it before any pause")

        var starts = started.makeAsyncIterator()
        for _ in 0..<3 { _ = await starts.next() }  // the three rounds' pauses
        // A child task, so that the time limit's cancellation ends it if the kick does not.
        async let waiting: Void = sender.waitForWork(upTo: .seconds(600))
        #expect(await starts.next() == .seconds(600), "the sender sleeps")
        sender.kick()
        await waiting  // only the kick can end it (the pause sleeps until cancelled)
        #expect(!Task.isCancelled, "the kick ended the wait, not the time limit")

        blocking.withLock { $0 = false }
        waits.withLock { $0.removeAll() }
        await sender.waitForWork(upTo: .milliseconds(120))
        #expect(waits.withLock { $0 } == [.milliseconds(120)], "one kick, one wake")
        startedContinuation.finish()
    }
}
