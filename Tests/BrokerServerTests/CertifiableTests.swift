import BrokerCore
import BrokerCrypto
import BrokerHTTPTypes
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// What the OpenID Foundation's OP plans check of an authorization request beyond the basics (issue
/// "Certifiable"): unknown scopes, `address` and `phone`, the `claims` parameter, `acr`/`amr`/`acr_values`,
/// request objects refused as discovery says — each named after the conformance module it stands for.
@Suite("Certifiable: claims, scopes, acr and the rest of what the OP plans ask")
struct CertifiableTests {
    typealias OP = OpenIDProviderTests
    typealias Flow = InProcessBrowserFlowTests

    // MARK: The rules, without a server

    @Test func aClaimsParameterIsParsedAndWhatBrokerNeverIssuesIsDropped() throws {
        let request = try ClaimsRequest.parse(
            """
            {"id_token": {"email": null, "acr": {"essential": true, "values": ["2", "1"]}, "x-custom": null},
             "userinfo": {"name": {"essential": true}, "sub": {"value": "custom:u-1"}},
             "other": 7}
            """)
        #expect(request.idToken["email"] == ClaimsRequest.Claim())
        #expect(request.idToken["acr"] == ClaimsRequest.Claim(essential: true, values: ["2", "1"]))
        #expect(request.idToken["x-custom"] == nil, "a claim broker never issues is ignored")
        #expect(request.userinfo["name"]?.essential == true)
        #expect(request.userinfo["sub"]?.values == ["custom:u-1"])
        #expect(request.impliedScopes == ["email", "profile"])
        // What is sealed and stored reads back the same.
        #expect(try ClaimsRequest.parse(request.serialized) == request)
    }

    @Test(arguments: [
        ("[1]", "JSON object"), ("{\"id_token\": []}", "claims.id_token"), ("not json", "JSON object"),
        ("{\"userinfo\": {\"name\": 1}}", "claims.userinfo.name"),
        ("{\"id_token\": {\"acr\": {\"essential\": \"yes\"}}}", "essential"),
        ("{\"id_token\": {\"acr\": {\"values\": []}}}", "values"),
        ("{\"id_token\": {\"acr\": {\"value\": {\"a\": 1}}}}", "value"),
    ])
    func aMalformedClaimsParameterSaysWhy(text: String, names: String) {
        #expect {
            try ClaimsRequest.parse(text)
        } throws: { error in
            (error as? ClaimsRequest.Malformed)?.description.contains(names) == true
        }
        let long = "{\"id_token\": {\"email\": null, \"pad\": \"" + String(repeating: "x", count: 3000) + "\"}}"
        #expect(throws: ClaimsRequest.Malformed.self) { try ClaimsRequest.parse(long) }
    }

    @Test func unknownScopesAreIgnoredAndAScopeTheAppMayNotHaveIsLeftOut() {
        let app = AppRecord(clientID: "web", secretHash: nil, redirectURIs: [], scopes: ["files:read"], createdAt: 0)
        #expect(AppRules.scopes("openid frobnicate email openid", app: app) == ["openid", "email"])
        #expect(
            AppRules.scopes("openid address phone files:read files:write", app: app) == [
                "openid", "address", "phone", "files:read",
            ])
        #expect(AppRules.scopes("", app: app).isEmpty)
    }

    @Test func acrSaysHowStronglyAndAmrOnlyWithRegisteredMethods() throws {
        #expect(AuthenticationContext.claims(.custom) == ["acr": "1", "amr": ["pwd"]])
        #expect(AuthenticationContext.claims(.passkey) == ["acr": "2", "amr": ["pop", "mfa"]])
        #expect(AuthenticationContext.claims(ProviderID("google")) == ["acr": "1"], "no fed: not an RFC 8176 value")
        let wantsTwo = try ClaimsRequest.parse(#"{"id_token": {"acr": {"essential": true, "values": ["2"]}}}"#)
        #expect(!AuthenticationContext.meets(wantsTwo, acr: "1"))
        #expect(AuthenticationContext.meets(wantsTwo, acr: "2"))
        let wantsOne = try ClaimsRequest.parse(#"{"id_token": {"acr": {"essential": true, "values": ["1"]}}}"#)
        #expect(AuthenticationContext.meets(wantsOne, acr: "2"), "more than asked for does")
        let voluntary = try ClaimsRequest.parse(#"{"id_token": {"acr": {"values": ["2"]}}}"#)
        #expect(AuthenticationContext.meets(voluntary, acr: "1"), "not essential: a preference")
        #expect(AuthenticationContext.meets(nil, acr: "1"))
    }

    // MARK: Through the broker

    /// The app `web`, first-party (no consent page), and a password user signed in at its page — or already
    /// signed in in `jar`: the answer at the redirect URI.
    private static func code(
        _ client: InProcessBroker.Client, _ jar: OP.Jar, scope: String, extra: [(String, String)], email: String
    ) async throws -> [String: String] {
        let page = try await OP.get(client, OP.authorizeURI(OP.webRequest(scope: scope, extra: extra)), jar)
        if let location = page.header("Location") { return Flow.query(location) }
        #expect(page.status == 200, "the sign-in page")
        let signedIn = try await OP.passwordSignIn(client, page: page, jar, email: email)
        return Flow.query(try #require(OP.destination(signedIn)))
    }

    /// oidcc-claims-essential, and the claims parameter's two members: a claim asked for by name comes whatever
    /// the scopes, where it was asked for.
    @Test func claimsNamedInTheClaimsParameterComeWhereTheyWereAskedFor() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("cy@example.com", OP.password)
            let jar = OP.Jar()
            let claims = #"{"id_token": {"email": null}, "userinfo": {"name": {"essential": true}, "email": null}}"#
            let back = try await Self.code(
                client, jar, scope: "openid", extra: [("claims", claims)], email: "cy@example.com")
            let tokens = try await OP.redeem(client, code: try #require(back["code"]))
            #expect(tokens.status == 200, "\(String(describing: tokens.json))")
            #expect(tokens["scope"]?.stringValue == "openid", "the grant's scope is what was asked for")
            let idTokenText = try #require(tokens["id_token"]?.stringValue)
            let idToken = try #require(jwtParts(idTokenText).claims)
            #expect(idToken["email"] == "cy@example.com", "asked for in the id token by name, without the scope")
            #expect(idToken["name"] == nil, "asked for at userinfo only")
            #expect(idToken["email_verified"] == nil, "not asked for")
            #expect(idToken["acr"] == "1" && idToken["amr"] == ["pwd"])
            let info = try await client.get("/auth/userinfo", bearer: tokens["access_token"]?.stringValue)
            #expect(info.status == 200)
            #expect(info["email"]?.stringValue == "cy@example.com")
            #expect(info["email_verified"] == nil)
            #expect(info["sub"] != nil)
            // The access token says how the user signed in too.
            let accessText = try #require(tokens["access_token"]?.stringValue)
            let access = try #require(jwtParts(accessText).claims)
            #expect(access["acr"] == "1" && access["amr"] == ["pwd"])
            // A refresh keeps what the sign-in asked userinfo for.
            let again = try await Self.code(
                client, jar, scope: "openid offline_access", extra: [("claims", claims)], email: "cy@example.com")
            let offline = try await OP.redeem(client, code: try #require(again["code"]))
            let refreshed = try await OP.redeemRefresh(client, try #require(offline["refresh_token"]?.stringValue))
            #expect(refreshed.status == 200)
            let refreshedToken = try #require(refreshed["access_token"]?.stringValue)
            #expect(try await client.get("/auth/userinfo", bearer: refreshedToken)["email"] == "cy@example.com")
            // oidcc-userinfo-post-header: POST with the token in the Authorization header.
            let postHeader = try await client.send(
                .post, "/auth/userinfo", headers: [.authorization: "Bearer \(refreshedToken)"], body: [])
            #expect(postHeader.status == 200 && postHeader["email"] == "cy@example.com")
        }
    }

    /// oidcc-scope-address, -phone, -all: the scopes are taken, answered with what broker has — nothing.
    @Test func addressAndPhoneScopesAreTakenAndAnsweredWithNothing() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("di@example.com", OP.password)
            let back = try await Self.code(
                client, OP.Jar(), scope: "openid profile email address phone", extra: [], email: "di@example.com")
            let tokens = try await OP.redeem(client, code: try #require(back["code"]))
            #expect(tokens["scope"]?.stringValue == "openid profile email address phone")
            let info = try await client.get("/auth/userinfo", bearer: tokens["access_token"]?.stringValue)
            #expect(info.status == 200 && info["email"] == "di@example.com")
            #expect(info["address"] == nil && info["phone_number"] == nil)
        }
    }

    /// An essential acr of "2" (a passkey) asked of a password session: the sign-in page says so; under
    /// prompt=none, interaction_required; a password sign-in again does not reach it (Core 5.5.1.1), and the app is
    /// told unmet_authentication_requirements. acr_values alone is a preference (oidcc-ensure-request-with-acr-
    /// values-succeeds).
    @Test func anEssentialAcrIsMetOrTheAppIsToldAndAcrValuesIsAPreference() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("ed@example.com", OP.password)
            let jar = OP.Jar()
            let preferred = try await Self.code(
                client, jar, scope: "openid", extra: [("acr_values", "2 1")], email: "ed@example.com")
            let tokens = try await OP.redeem(client, code: try #require(preferred["code"]))
            #expect(jwtParts(try #require(tokens["id_token"]?.stringValue)).claims?["acr"] == "1")

            let essential = [("claims", #"{"id_token": {"acr": {"essential": true, "values": ["2"]}}}"#)]
            let silent = try await OP.get(
                client, OP.authorizeURI(OP.webRequest(scope: "openid", extra: essential + [("prompt", "none")])), jar)
            #expect(Flow.query(try #require(silent.header("Location")))["error"] == "interaction_required")
            let page = try await OP.get(client, OP.authorizeURI(OP.webRequest(scope: "openid", extra: essential)), jar)
            #expect(page.status == 200)
            #expect(
                String(decoding: page.body, as: UTF8.self).contains(
                    "asks for two factors: a passkey, or a password and a code"))
            let signedIn = try await OP.passwordSignIn(client, page: page, jar, email: "ed@example.com")
            let refused = Flow.query(try #require(OP.destination(signedIn)))
            #expect(refused["error"] == "unmet_authentication_requirements" && refused["code"] == nil)
            #expect(refused["state"] == "st-1")
        }
    }

    /// A claims parameter naming another user's sub than the one signed in: as with id_token_hint, only that
    /// user's sign-in answers (Core 5.5.1), and prompt=none says login_required.
    @Test func aSubAskedForWithAValueIsOnlyAnsweredForThatUser() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("fa@example.com", OP.password)
            let jar = OP.Jar()
            _ = try await Self.code(client, jar, scope: "openid", extra: [], email: "fa@example.com")
            let other = [("claims", #"{"id_token": {"sub": {"value": "custom:u-someone-else"}}}"#), ("prompt", "none")]
            let reply = try await OP.get(client, OP.authorizeURI(OP.webRequest(scope: "openid", extra: other)), jar)
            #expect(Flow.query(try #require(reply.header("Location")))["error"] == "login_required")
        }
    }

    /// The Basic plan's request variants, each a sign-in that must simply work: oidcc-display-page and -popup,
    /// oidcc-ui-locales, oidcc-claims-locales, oidcc-login-hint (the field filled), oidcc-ensure-post-request-
    /// succeeds (the request as a form POST), oidcc-ensure-request-without-nonce-succeeds-for-code-flow,
    /// oidcc-prompt-login (a signed-in person is asked again), oidcc-max-age-10000 (not asked again), and
    /// oidcc-id-token-hint with an id token that has expired since (prompt=none still answers, for the same sub).
    @Test func theBasicPlansRequestVariantsEachSignIn() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("gu@example.com", OP.password)
            let jar = OP.Jar()
            let first = try await Self.code(
                client, jar, scope: "openid", extra: [("display", "page"), ("ui_locales", "fr-CA fr en")],
                email: "gu@example.com")
            let tokens = try await OP.redeem(client, code: try #require(first["code"]))
            let idToken = try #require(tokens["id_token"]?.stringValue)
            let sub = jwtParts(idToken).claims?["sub"]
            for extra in [
                [("display", "popup")], [("claims_locales", "de")], [("max_age", "10000")],
                [("display", "touch"), ("ui_locales", "xx")],
            ] {
                let answer = try await OP.get(
                    client, OP.authorizeURI(OP.webRequest(scope: "openid", extra: extra)), jar)
                #expect(Flow.query(answer.header("Location") ?? "")["code"] != nil, "\(extra)")
            }
            let noNonce = try await OP.get(client, OP.authorizeURI(OP.webRequest(scope: "openid", nonce: nil)), jar)
            let noNonceCode = try #require(Flow.query(noNonce.header("Location") ?? "")["code"])
            let noNonceTokens = try await OP.redeem(client, code: noNonceCode)
            #expect(jwtParts(try #require(noNonceTokens["id_token"]?.stringValue)).claims?["nonce"] == nil)
            // As a form POST.
            var headers = jar.header
            headers[.contentType] = "application/x-www-form-urlencoded"
            let posted = try await client.send(
                .post, "/auth/authorize", headers: headers,
                body: Array(FormEncoding.encode(OP.webRequest(scope: "openid")).utf8))
            #expect(Flow.query(posted.header("Location") ?? "")["code"] != nil)
            // prompt=login asks a signed-in person again, login_hint filling the field.
            let login = try await OP.get(
                client,
                OP.authorizeURI(
                    OP.webRequest(scope: "openid", extra: [("prompt", "login"), ("login_hint", "gu@example.com")])),
                jar)
            #expect(login.status == 200 && OP.hidden(login, "request") != nil)
            #expect(String(decoding: login.body, as: UTF8.self).contains("value=\"gu@example.com\""))
            // Hours later the id token has expired; as a hint it still names its user.
            broker.clock.advance(by: 7200)
            let hinted = try await OP.get(
                client,
                OP.authorizeURI(
                    OP.webRequest(scope: "openid", extra: [("prompt", "none"), ("id_token_hint", idToken)])), jar)
            let hintedCode = try #require(Flow.query(hinted.header("Location") ?? "")["code"], "\(hinted.status)")
            let hintedTokens = try await OP.redeem(client, code: hintedCode)
            #expect(jwtParts(try #require(hintedTokens["id_token"]?.stringValue)).claims?["sub"] == sub)
        }
    }

    /// The RP-Initiated Logout plan's other modules: a modified id_token_hint (-modified-id-token-hint) is refused
    /// and signs nobody out; a query added to the registered post-logout URI (-query-added-to-post-logout-
    /// redirect-uri) is not it; with no post_logout_redirect_uri (-no-post-logout-redirect-uri) or no state
    /// (-no-state) the logout happens and says so, or returns without a state; no parameters at all
    /// (-no-params) and only a state (-only-state) ask the person first.
    @Test func theRPInitiatedLogoutPlansModules() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("ho@example.com", OP.password)
            func signedIn() async throws -> (OP.Jar, String) {
                let jar = OP.Jar()
                let tokens = try await OP.signInAndRedeem(client, email: "ho@example.com", scope: "openid", jar)
                return (jar, try #require(tokens["id_token"]?.stringValue))
            }
            func endSession(_ fields: [(String, String)], _ jar: OP.Jar) async throws -> InProcessBroker.Client.Reply {
                try await OP.get(client, "/auth/end-session?" + FormEncoding.encode(fields), jar)
            }
            let (jar, idToken) = try await signedIn()
            let modified = String(idToken.dropLast(4)) + (idToken.hasSuffix("AAAA") ? "BBBB" : "AAAA")
            let tampered = try await endSession(
                [("id_token_hint", modified), ("post_logout_redirect_uri", "https://app.example/bye")], jar)
            #expect(tampered.status == 400 && tampered.header("Location") == nil)
            let added = try await endSession(
                [("id_token_hint", idToken), ("post_logout_redirect_uri", "https://app.example/bye?x=1")], jar)
            #expect(added.status == 400 && added.header("Location") == nil)
            #expect(jar.cookies["broker_session"] != nil, "nobody signed out yet")
            let noState = try await endSession(
                [("id_token_hint", idToken), ("post_logout_redirect_uri", "https://app.example/bye")], jar)
            #expect(noState.status == 302 && noState.header("Location") == "https://app.example/bye")
            #expect(jar.cookies["broker_session"] == nil)

            let (second, secondToken) = try await signedIn()
            let noRedirect = try await endSession([("id_token_hint", secondToken)], second)
            #expect(noRedirect.status == 200 && String(decoding: noRedirect.body, as: UTF8.self).contains("signed out"))
            #expect(second.cookies["broker_session"] == nil)

            let (third, _) = try await signedIn()
            for fields in [[], [("state", "only")]] {
                let asked = try await endSession(fields, third)
                #expect(asked.status == 200, "\(fields)")
                #expect(String(decoding: asked.body, as: UTF8.self).contains("Sign out of broker?"))
            }
            #expect(third.cookies["broker_session"] != nil, "asked, not yet signed out")
        }
    }

    /// oidcc-userinfo-rs256: an app that registered userinfo_signed_response_alg gets its userinfo as a JWT signed
    /// like its id tokens, from broker to it (`iss`, `aud`), verifiable against the JWKS; others keep JSON.
    @Test func userinfoIsSignedForAnAppThatAskedForIt() async throws {
        let broker = try await InProcessBroker()
        try await broker.store.createApp(
            AppRecord(
                clientID: "web", secretHash: broker.service.appTokens.secrets.hash(Secret(OP.secret)),
                redirectURIs: [OP.web], firstParty: true, createdAt: broker.clock.seconds(), userinfoAlgorithm: "RS256")
        )
        try await broker.test { client in
            _ = try await client.register("iv@example.com", OP.password)
            let tokens = try await OP.signInAndRedeem(client, email: "iv@example.com")
            let info = try await client.get("/auth/userinfo", bearer: tokens["access_token"]?.stringValue)
            #expect(info.status == 200 && info.header("Content-Type") == "application/jwt")
            let jwt = String(decoding: info.body, as: UTF8.self)
            let jwks = try await client.get("/.well-known/jwks.json")
            let keys = try JWTKeySet(jwks: JWKSet.parse(jwks.body))
            // Core 5.3.2 asks for iss and aud; a userinfo answer has no lifetime of its own.
            var options = JWTVerifier.Options(issuer: "http://broker.test", audience: "web", expectedType: nil)
            options.requireExpiry = false
            let verified = try JWTVerifier(keys: keys, options: options).verify(jwt, now: broker.clock.seconds())
            #expect(verified.algorithm == .RS256 && verified["email"] == "iv@example.com")
            let idToken = try #require(tokens["id_token"]?.stringValue)
            #expect(verified.subject == jwtParts(idToken).claims?["sub"]?.stringValue)
            let discovery = try await client.get("/.well-known/openid-configuration")
            #expect(discovery["userinfo_signing_alg_values_supported"]?.arrayValue?.contains("RS256") == true)
        }
    }

    /// Request objects (Core 6): oidcc-unsigned-request-object-supported-correctly-or-rejected-as-unsupported and
    /// oidcc-ensure-request-object-with-redirect-uri (the redirect URI and state only in the object, by value),
    /// oidcc-request-uri-unsigned (by reference, fetched from public addresses only), oidcc-request-uri-signed-rs256
    /// (signed by the app's registered key); a stranger's signature, a signed object from an app without keys and
    /// another client_id are invalid_request_object at the redirect URI.
    @Test func requestObjectsByValueAndByReferenceAreUsed() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        let key = try AsymmetricKey.generate(.ecP256)
        let publicKey = try JSONValue.parse(JSONEncoder().encode(key.jwk())) ?? .null
        try await broker.store.createApp(
            AppRecord(
                clientID: "keyed", secretHash: nil, redirectURIs: [OP.web], firstParty: true,
                createdAt: broker.clock.seconds(), jwks: JSONValue.object(["keys": .array([publicKey])]).serialized()))
        @Sendable func unsigned(_ claims: JSONValue) -> String {
            Base64URL.encode(Array(#"{"alg":"none"}"#.utf8)) + "." + Base64URL.encode(claims.serializedBytes) + "."
        }
        let objectURL = "https://app.example/objects/1.jwt"
        let inObject: JSONValue = [
            "client_id": "web", "redirect_uri": .string(OP.web), "scope": "openid email", "state": "from-object",
            "nonce": "n-object", "response_type": "code",
        ]
        broker.transport.on("GET", objectURL) { _ in
            HTTPClientResponse(status: 200, headers: [], body: Array(unsigned(inObject).utf8))
        }
        try await broker.test { client in
            _ = try await client.register("jo@example.com", OP.password)
            let jar = OP.Jar()
            // By value, the redirect URI in the object alone.
            let byValue = try await OP.get(
                client,
                OP.authorizeURI([
                    ("client_id", "web"), ("response_type", "code"), ("scope", "openid"),
                    ("request", unsigned(inObject)),
                ]), jar)
            #expect(byValue.status == 200, "the sign-in page: \(byValue.status)")
            let signedIn = try await OP.passwordSignIn(client, page: byValue, jar, email: "jo@example.com")
            let back = Flow.query(try #require(OP.destination(signedIn)))
            #expect(back["state"] == "from-object" && back["code"] != nil)
            let tokens = try await OP.redeem(client, code: try #require(back["code"]))
            #expect(jwtParts(try #require(tokens["id_token"]?.stringValue)).claims?["nonce"] == "n-object")
            // By reference.
            let byReference = try await OP.get(
                client,
                OP.authorizeURI([
                    ("client_id", "web"), ("response_type", "code"), ("scope", "openid"), ("request_uri", objectURL),
                ]), jar)
            #expect(Flow.query(byReference.header("Location") ?? "")["state"] == "from-object")
            // Only from the host of one of the app's redirect URIs: a client id alone cannot send broker fetching.
            let elsewhere = try await OP.get(
                client,
                OP.authorizeURI([
                    ("client_id", "web"), ("response_type", "code"), ("redirect_uri", OP.web),
                    ("request_uri", "https://elsewhere.example/1.jwt"),
                ]), jar)
            let refusedHost = Flow.query(elsewhere.header("Location") ?? "")
            #expect(refusedHost["error"] == "invalid_request_uri")
            #expect(refusedHost["error_description"]?.contains("host") == true)
            // Signed by the app's key.
            let claims: [String: JSONValue] = [
                "iss": "keyed", "aud": "http://broker.test", "client_id": "keyed", "redirect_uri": .string(OP.web),
                "scope": "openid", "state": "signed", "response_type": "code",
            ]
            let signed = try JWTSigner(key: key).sign(claims: claims, type: "oauth-authz-req+jwt")
            let keyedRequest = [("client_id", "keyed"), ("response_type", "code"), ("redirect_uri", OP.web)]
            let good = try await OP.get(client, OP.authorizeURI(keyedRequest + [("request", signed)]), jar)
            #expect(Flow.query(good.header("Location") ?? "")["state"] == "signed")
            let stranger = try JWTSigner(key: try AsymmetricKey.generate(.ecP256)).sign(claims: claims)
            let forged = try await OP.get(client, OP.authorizeURI(keyedRequest + [("request", stranger)]), jar)
            #expect(Flow.query(forged.header("Location") ?? "")["error"] == "invalid_request_object")
            let webSigned = try JWTSigner(key: key).sign(claims: ["iss": "web", "aud": "http://broker.test"])
            let noKeys = try await OP.get(
                client,
                OP.authorizeURI([
                    ("client_id", "web"), ("response_type", "code"), ("redirect_uri", OP.web), ("request", webSigned),
                ]),
                jar)
            #expect(Flow.query(noKeys.header("Location") ?? "")["error"] == "invalid_request_object")
            var other = inObject.objectValue ?? [:]
            other["client_id"] = "native"
            let mismatch = try await OP.get(
                client,
                OP.authorizeURI([
                    ("client_id", "web"), ("response_type", "code"), ("redirect_uri", OP.web),
                    ("request", unsigned(.object(other))),
                ]), jar)
            #expect(Flow.query(mismatch.header("Location") ?? "")["error"] == "invalid_request_object")
        }
        let fetch = try #require(broker.transport.sent.first { $0.url == objectURL })
        #expect(fetch.publicAddressesOnly)
        #expect(!broker.transport.sent.contains { $0.url.contains("elsewhere.example") }, "not fetched")
    }

    /// oidcc-discovery-endpoint-verification and the Config OP plan: what the request handling above is
    /// published as.
    @Test func discoverySaysWhatIsSupported() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let discovery = try await client.get("/.well-known/openid-configuration")
            #expect(discovery["claims_parameter_supported"] == true)
            #expect(discovery["acr_values_supported"] == ["1", "2"])
            #expect(discovery["request_parameter_supported"] == true)
            #expect(discovery["request_uri_parameter_supported"] == true)
            #expect(discovery["request_object_signing_alg_values_supported"]?.arrayValue?.contains("none") == true)
            #expect(discovery["response_types_supported"] == ["code"], "no implicit, no hybrid (OAuth 2.1)")
            #expect(discovery["response_modes_supported"] == ["query", "form_post"])
            let scopes = discovery["scopes_supported"]?.arrayValue?.compactMap(\.stringValue) ?? []
            #expect(
                Set(["openid", "profile", "email", "address", "phone", "offline_access"]).isSubset(of: Set(scopes)))
            let claims = discovery["claims_supported"]?.arrayValue?.compactMap(\.stringValue) ?? []
            #expect(claims.contains("acr") && claims.contains("amr"))
        }
    }
}
