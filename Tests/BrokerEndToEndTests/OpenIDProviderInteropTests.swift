import BrokerCore
import BrokerHTTP
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// The OpenID Provider against relying-party code nobody here wrote: Python's Authlib (the flow) and joserfc
/// (the id token), on a real `broker serve` with apps registered by `broker client add`.
@Suite("OpenID Provider: relying parties we did not write")
struct OpenIDProviderInteropTests {
    static let password = "correct horse battery staple"

    @Test func authlibSignsInWithCodePKCEAndNonceAndSingleSignOnReachesASecondApp() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let web = try await CLI.run(
            [
                "client", "add", "web", "--redirect-uri", "https://web.example/callback", "--json", "--data-dir",
                server.dataDirectory,
            ])
        #expect(web.status == 0, "\(web.stderr)")
        let secret = try #require(JSONValue.parse(Array(web.stdout.utf8))?["client_secret"]?.stringValue)
        let native = try await CLI.run(
            [
                "client", "add", "native", "--public", "--first-party", "--redirect-uri",
                "http://127.0.0.1/callback", "--json", "--data-dir", server.dataDirectory,
            ])
        #expect(native.status == 0, "\(native.stderr)")
        #expect(JSONValue.parse(Array(native.stdout.utf8))?["client_secret"] == nil, "a public app has no secret")
        let listed = try await CLI.run(["client", "list", "--json", "--data-dir", server.dataDirectory])
        let clients = JSONValue.parse(Array(listed.stdout.utf8))?["clients"]?.arrayValue ?? []
        #expect(clients.first { $0["client_id"] == "web" }?["redirect_uris"] == ["https://web.example/callback"])
        #expect(clients.first { $0["client_id"] == "native" }?["kind"] == "public_app")
        let bad = try await CLI.run(
            ["client", "add", "bad", "--redirect-uri", "http://web.example/cb", "--data-dir", server.dataDirectory])
        #expect(bad.status == 64 && bad.stderr.contains("https is required"), "\(bad.stderr)")
        let eddsa = try await CLI.run(
            [
                "client", "add", "eddsa", "--redirect-uri", "https://e.example/cb", "--id-token-alg", "EdDSA",
                "--data-dir", server.dataDirectory,
            ])
        #expect(eddsa.status == 1 && eddsa.stderr.contains("signs with ES256"), "\(eddsa.stderr)")
        let es256 = try await CLI.run(
            [
                "client", "add", "es", "--redirect-uri", "https://e.example/cb", "--id-token-alg", "ES256",
                "--data-dir", server.dataDirectory,
            ])
        #expect(es256.status == 0, "the ring's own algorithm: \(es256.stderr)")
        // An app without a secret that signs its own assertions (private_key_jwt), its key made by joserfc.
        let keyDirectory = try BrokerProcess.temporaryDirectory()
        let made = try await Interop.run(["oidc_relying_party.py", "--make-key", keyDirectory.path])
        #expect(made.status == 0, "\(made.stderr)")
        let privateFile = keyDirectory.path + "/private.json"
        let refusedPrivate = try await CLI.run(
            [
                "client", "add", "leaky", "--redirect-uri", "https://keyed.example/callback", "--jwks-file",
                privateFile, "--data-dir", server.dataDirectory,
            ])
        #expect(refusedPrivate.status == 1 && refusedPrivate.stderr.contains("JWK Set"), "\(refusedPrivate.stderr)")
        let keyed = try await CLI.run(
            [
                "client", "add", "keyed", "--redirect-uri", "https://keyed.example/callback", "--jwks-file",
                keyDirectory.path + "/public.json", "--json", "--data-dir", server.dataDirectory,
            ])
        #expect(keyed.status == 0, "\(keyed.stderr)")
        #expect(JSONValue.parse(Array(keyed.stdout.utf8))?["client_secret"] == nil, "no secret: its keys")

        let userID = try #require(try await server.register("rp@example.com", Self.password)["user_id"]?.stringValue)

        let result = try await Interop.run(
            ["oidc_relying_party.py", server.url, secret, "rp@example.com", Self.password, keyDirectory.path])
        #expect(result.status == 0, "\(result.stderr)")
        let seen = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout)")
        #expect(seen["id_token_alg"] == "RS256")
        #expect(seen["sub"]?.stringValue == userID)
        #expect(seen["email"] == "rp@example.com")
        #expect(seen["iss_in_response"]?.stringValue == server.url)
        #expect(seen["has_refresh_token"] == false)
        #expect(seen["userinfo_get"]?["sub"]?.stringValue == userID)
        #expect(seen["userinfo_post"]?["email"] == "rp@example.com")
        #expect(seen["userinfo_id_token"] == 401)
        #expect(seen["sso_sub"]?.stringValue == userID, "the second app signed in without credentials")
        #expect(seen["prompt_none_without_session"] == "login_required")
        #expect(
            seen["form_post_sub"]?.stringValue == userID,
            "response_mode=form_post, redeemed by Authlib with client_secret_jwt")
        #expect(seen["form_post_policy"]?.stringValue?.contains("form-action https://web.example") == true)
        // private_key_jwt with Authlib's PrivateKeyJWT, and the claims parameter: email in the id token and name
        // at userinfo, with the openid scope alone; a replayed assertion refused.
        #expect(seen["keyed_id_token_email"] == "rp@example.com", "\(seen)")
        #expect(seen["keyed_id_token_name"] == JSONValue.null, "name was asked of userinfo only")
        #expect(seen["keyed_acr"] == "1" && seen["keyed_amr"] == ["pwd"])
        #expect(seen["keyed_userinfo"]?["sub"]?.stringValue == userID)
        #expect(seen["keyed_userinfo"]?["email"] == nil, "not asked for at userinfo")
        #expect(seen["keyed_first_use"] == "invalid_grant", "authenticated, then the made-up code refused")
        #expect(seen["keyed_replay"] == "invalid_client", "the same assertion again")
        // Pairwise subjects: one sector (host) per app, said by client list.
        let twoHosts = try await CLI.run(
            [
                "client", "add", "spread", "--pairwise", "--redirect-uri", "https://a.example/cb", "--redirect-uri",
                "https://b.example/cb", "--data-dir", server.dataDirectory,
            ])
        #expect(twoHosts.status == 64 && twoHosts.stderr.contains("more than one host"), "\(twoHosts.stderr)")
        let pairwise = try await CLI.run(
            [
                "client", "add", "private", "--pairwise", "--redirect-uri", "https://private.example/cb",
                "--data-dir", server.dataDirectory,
            ])
        #expect(pairwise.status == 0, "\(pairwise.stderr)")
        let keyedListed = try await CLI.run(["client", "list", "--json", "--data-dir", server.dataDirectory])
        let keyedEntry = JSONValue.parse(Array(keyedListed.stdout.utf8))?["clients"]?.arrayValue?.first {
            $0["client_id"] == "keyed"
        }
        #expect(keyedEntry?["token_endpoint_auth_method"] == "private_key_jwt")
        let apps = JSONValue.parse(Array(keyedListed.stdout.utf8))?["clients"]?.arrayValue ?? []
        #expect(apps.first { $0["client_id"] == "private" }?["subject_type"] == "pairwise")
        #expect(keyedEntry?["subject_type"] == "public")

        // The broker's browser sign-in is a session like the others: listed, and revoked by id.
        let sessions = try await CLI.run(["sessions", "list", "--json", "--data-dir", server.dataDirectory])
        let listed2 = JSONValue.parse(Array(sessions.stdout.utf8))?["sessions"]?.arrayValue ?? []
        let browser = try #require(listed2.first { $0["kind"] == "browser" }, "\(sessions.stdout)")
        #expect(browser["user_id"]?.stringValue == userID && browser["signed_in_with"] == "custom")
        #expect(listed2.contains { $0["kind"] == "tokens" && $0["client_id"] == "web" })
        let revoked = try await CLI.run(
            [
                "sessions", "revoke", try #require(browser["session_id"]?.stringValue), "--data-dir",
                server.dataDirectory,
            ])
        #expect(revoked.status == 0 && revoked.stderr.contains("revoked"), "\(revoked.stderr)")

        // Removing an app ends the sessions it started.
        let removed = try await CLI.run(["client", "remove", "native", "--data-dir", server.dataDirectory])
        #expect(removed.status == 0 && removed.stderr.contains("ended 1 session"), "\(removed.stderr)")
    }
}

extension ApacheRelyingPartyTests {
    /// Issue "Logout everywhere…" with Apache's module as the app: its logout (`?logout=`) reaches broker's
    /// end-session and comes back to the registered page (and broker's sign-in is gone too); its back-channel
    /// receiver ends its own session when `broker sessions revoke --user` ends the person's sessions at the
    /// store (the running broker's sender delivers the logout token); and as an OAuth 2.0 resource server
    /// asking broker's introspection it admits a live token and refuses a revoked one.
    @Test func apacheLogsOutThroughBrokerAndIsToldWhenBrokerEndsTheSession() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let port = try freeLoopbackPort()
        let base = "http://127.0.0.1:\(port)"
        let added = try await CLI.run(
            [
                "client", "add", "apache", "--redirect-uri", base + "/protected/redirect_uri",
                "--post-logout-redirect-uri", base + "/loggedout.html", "--backchannel-logout-uri",
                base + "/protected/redirect_uri?logout=backchannel", "--json", "--data-dir", server.dataDirectory,
            ])
        #expect(added.status == 0, "\(added.stderr)")
        let secret = try #require(JSONValue.parse(Array(added.stdout.utf8))?["client_secret"]?.stringValue)
        // The module's resource-server half introspects the APIs' tokens: a CI client may (RT3-6), the app may not.
        let resourceServer = try await CLI.run(
            ["client", "add", "apache-api", "--json", "--data-dir", server.dataDirectory])
        #expect(resourceServer.status == 0, "\(resourceServer.stderr)")
        let rsSecret = try #require(
            JSONValue.parse(Array(resourceServer.stdout.utf8))?["client_secret"]?.stringValue)
        let email = "logout@example.com"
        let password = OpenIDProviderInteropTests.password
        let registered = try await server.register(email, password)
        let userID = try #require(registered["user_id"]?.stringValue)
        let first = try #require(registered["access_token"]?.stringValue)
        let second = try #require(try await server.login(email, password)["access_token"]?.stringValue)
        let revoke = JSONValue.array(
            [BrokerProcess.binary, "sessions", "revoke", "--user", userID, "--data-dir", server.dataDirectory].map(
                JSONValue.string))
        let shots = ProcessInfo.processInfo.environment["BROKER_SCREENSHOTS"]
        let result = try await ProcessRunner.python(
            "apache_relying_party.py",
            [server.url, "\(port)", secret, "logout", email, password] + (shots.map { [$0] } ?? []),
            environment: [
                "ACCESS_TOKEN": first, "ACCESS_TOKEN_2": second, "BROKER_REVOKE": revoke.serialized(),
                "RS_CLIENT_ID": "apache-api", "RS_CLIENT_SECRET": rsSecret,
            ])
        #expect(result.status == 0, "\(result.stderr)")
        let seen = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout)")
        #expect(seen["api_live_token"] == 200, "introspection admits a live token")
        #expect(seen["after_logout"]?["url"]?.stringValue == base + "/loggedout.html")
        #expect(seen["after_logout_protected"] == "Sign in to apache", "broker's session ended with the app's")
        #expect(seen["signed_in_again"] == "The app")
        #expect(seen["after_backchannel"] == "Sign in to apache", "the back-channel logout ended Apache's session")
        #expect(seen["api_revoked_token"] == 401, "introspection refuses a revoked token")
        // Two logout tokens taken by the module: the end-session's (its own logout) and the revocation's.
        let metrics = try await server.get("/metrics")
        #expect(
            String(decoding: metrics.response.body, as: UTF8.self).contains(
                #"broker_backchannel_logouts_total{outcome="delivered"} 2"#))
    }
}

/// idpyoidc (PAR and DPoP, issue "Logout everywhere…") as an app of a real broker, and the back-channel logout token
/// as joserfc reads it: Tests/Interop/idpyoidc_par_dpop.py.
@Suite("OpenID Provider: idpyoidc pushes its request and binds its tokens")
struct IdpyoidcInteropTests {
    @Test func aPushedRequestIsRedeemedOnceAndADPoPBoundTokenNeedsItsProof() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let receiver = try freeLoopbackPort()
        let web = try await CLI.run(
            [
                "client", "add", "web", "--redirect-uri", "https://web.example/callback", "--require-par",
                "--backchannel-logout-uri", "http://127.0.0.1:\(receiver)/backchannel", "--json",
                "--data-dir", server.dataDirectory,
            ])
        #expect(web.status == 0, "\(web.stderr)")
        let secret = try #require(JSONValue.parse(Array(web.stdout.utf8))?["client_secret"]?.stringValue)
        #expect(try await server.register("idpy@example.com", OpenIDProviderInteropTests.password).status == 201)
        // Not pushed: refused (the app was added with --require-par).
        let direct = try await server.get(
            "/auth/authorize?response_type=code&client_id=web&scope=openid&redirect_uri="
                + "https%3A%2F%2Fweb.example%2Fcallback")
        #expect(direct.status == 400)

        let result = try await Interop.run(
            [
                "idpyoidc_par_dpop.py", server.url, secret, "idpy@example.com", OpenIDProviderInteropTests.password,
                "\(receiver)",
            ])
        #expect(result.status == 0, "\(result.stderr)")
        let seen = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout)")
        #expect(seen["par_status"] == 201 && seen["par_expires_in"] == 60)
        #expect(seen["par_without_client_auth"] == 401)
        #expect(seen["state"] == "par-state", "the pushed parameters were the request")
        #expect(seen["second_use_status"] == 400, "a request_uri works once")
        #expect(seen["token_type"] == "DPoP" && seen["cnf_is_idpyoidc_key"] == true)
        #expect(seen["userinfo_dpop"] == 200)
        #expect(seen["userinfo_replayed"] == 401)
        #expect(seen["userinfo_bearer"] == 401)
        #expect(seen["userinfo_other_url"] == 401)
        #expect(seen["userinfo_other_method"] == 401)
        #expect(seen["userinfo_add_on_hex_ath"] == 401, "idpyoidc's add-on writes ath in hex, not base64url")
        // Back-channel logout: the token as joserfc reads it against the JWKS.
        #expect(seen["end_session_status"] == 200)
        #expect(seen["logout_content_type"] == "application/x-www-form-urlencoded")
        #expect(seen["logout_typ"] == "logout+jwt" && seen["logout_alg"] == "RS256")
        #expect(seen["logout_event"] == .object([:]))
        #expect(seen["logout_has_nonce"] == false)
    }
}

/// Debian's Apache with mod_auth_openidc as an app, and headless Chromium through broker's own pages.
@Suite("OpenID Provider: Apache mod_auth_openidc in front of a page")
struct ApacheRelyingPartyTests {
    /// With the module's default (the code in the redirect's query) and with `OIDCResponseMode form_post` (broker's
    /// page posts it to the module; Apache's log shows the redirect URI called by POST).
    @Test(arguments: ["password", "form_post"])
    func chromiumSignsInThroughBrokerAndThePageShowsTheUser(way: String) async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let port = try freeLoopbackPort()
        let added = try await CLI.run(
            [
                "client", "add", "apache", "--redirect-uri", "http://127.0.0.1:\(port)/protected/redirect_uri",
                "--json", "--data-dir", server.dataDirectory,
            ])
        #expect(added.status == 0, "\(added.stderr)")
        let secret = try #require(JSONValue.parse(Array(added.stdout.utf8))?["client_secret"]?.stringValue)
        let userID = try #require(
            try await server.register("apache@example.com", OpenIDProviderInteropTests.password)["user_id"])

        let shots = ProcessInfo.processInfo.environment["BROKER_SCREENSHOTS"]
        let result = try await Interop.run(
            [
                "apache_relying_party.py", server.url, "\(port)", secret, way, "apache@example.com",
                OpenIDProviderInteropTests.password,
            ] + (way == "password" ? shots.map { [$0] } ?? [] : []))
        #expect(result.status == 0, "\(result.stderr)")
        let seen = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout)")
        #expect(seen["sub"] == userID, "the page shows the broker user id")
        #expect(seen["email"] == "apache@example.com")
        #expect(seen["pages"] == ["Sign in to apache", "Allow apache?", "The app"])
        #expect(seen["redirect_methods"] == (way == "form_post" ? ["POST"] : ["GET"]), "\(seen)")
    }
}

extension ApacheRelyingPartyTests {
    /// The same app, signing in with Google through `broker emulate`: the provider's round trip returns into the
    /// app's request, and the page shows the user made from the Google account.
    @Test func chromiumSignsInWithGoogleThroughBrokerAndTheEmulator() async throws {
        let emulator = try await EmulatorProcess.start()
        let server = try await BrokerProcess.start(config: emulator.googleOnlyConfig)
        defer { server.stop() }
        let port = try freeLoopbackPort()
        let added = try await CLI.run(
            [
                "client", "add", "apache", "--redirect-uri", "http://127.0.0.1:\(port)/protected/redirect_uri",
                "--json", "--data-dir", server.dataDirectory,
            ])
        #expect(added.status == 0, "\(added.stderr)")
        let secret = try #require(JSONValue.parse(Array(added.stdout.utf8))?["client_secret"]?.stringValue)
        let result = try await Interop.run([
            "apache_relying_party.py", server.url, "\(port)", secret, "google", "-", "-",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let seen = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout)")
        #expect(seen["sub"] == "google:104512345678901234567")
        #expect(seen["email"] == "alice@example.com")
        #expect(seen["pages"] == ["Sign in to apache", "Allow apache?", "The app"])
    }
}

/// Debian's oidc-agent as a native public client: a loopback redirect of its own, PKCE, no nonce.
@Suite("OpenID Provider: oidc-agent as a native app")
struct OIDCAgentTests {
    @Test func oidcAgentGetsTokensThroughBrokersPages() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let port = try freePort(in: 20_000..<32_000)
        let redirect = "http://localhost:\(port)"
        let added = try await CLI.run(
            ["client", "add", "agent", "--public", "--redirect-uri", redirect, "--data-dir", server.dataDirectory])
        #expect(added.status == 0, "\(added.stderr)")
        let userID = try #require(
            try await server.register("agent@example.com", OpenIDProviderInteropTests.password)["user_id"])
        let result = try await Interop.run(
            [
                "oidc_agent_native.py", server.url, "agent", redirect, "agent@example.com",
                OpenIDProviderInteropTests.password,
            ])
        #expect(result.status == 0, "\(result.stderr)")
        let seen = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout)")
        let url = try #require(seen["authorization_url"]?.stringValue)
        #expect(url.contains("code_challenge_method=S256") && !url.contains("nonce="), "PKCE, no nonce")
        let token = try #require(seen["access_token"]?.stringValue)
        // An app's token: the user's at userinfo, with the app's own audience, and refused at /auth/me (RT3-3, RT3-4).
        let info = try await server.get("/auth/userinfo", headers: [(name: "Authorization", value: "Bearer \(token)")])
        #expect(info.status == 200 && info["sub"] == userID, "oidc-token's token is the user's")
        #expect(jwtParts(token).claims?["client_id"] == "agent" && jwtParts(token).claims?["aud"] == "agent")
        #expect(try await server.me(token).status == 401, "an app's token is not for the broker's own endpoints")
    }
}
