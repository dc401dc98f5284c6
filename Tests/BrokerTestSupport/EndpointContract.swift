import BrokerCore
import Foundation
import Testing

/// Endpoint checks written once and run on both layers through ``EndpointClient`` (issue 30): in process by
/// BrokerServerTests' `EndpointContractTests`, against `broker serve` by BrokerEndToEndTests' `EndpointTests`.
/// Each takes a fresh broker.
package enum EndpointContract {
    package static let password = "correct horse battery staple"

    /// Registration's input rules: each body, and a word its refusal must say.
    package static let badRegistrations: [(body: String, says: String)] = [
        (#"{"email": "not-an-email", "password": "correct horse battery"}"#, "@"),
        (#"{"email": "a@b", "password": "correct horse battery"}"#, "domain"),
        (#"{"email": "a b@example.com", "password": "correct horse battery"}"#, "characters"),
        (#"{"email": "x@example.com", "password": "short12"}"#, "at least 8"),
        (#"{"email": "x@example.com", "password": "password1"}"#, "commonly used"),
        (#"{"email": "x@example.com", "password": "iloveyou"}"#, "commonly used"),
        (#"{"email": "x@example.com", "password": "x@example.com"}"#, "email"),
        (#"{"email": "x@example.com"}"#, "\"password\" is required"),
        (#"{"password": "correct horse battery"}"#, "\"email\" is required"),
        (#"{"email": 42, "password": "correct horse battery"}"#, "must be a string"),
        (#"{"email": "x@example.com", "password": "correct horse battery", "name": "a\u0007b"}"#, "control"),
    ]

    /// A bad registration (``badRegistrations``, by index; a fresh broker each: registrations per address are
    /// limited) is 400 `invalid_request` saying what is wrong, and creates nothing.
    package static func registrationRefusesBadInput(_ broker: EndpointClient, case index: Int) async throws {
        let (body, says) = badRegistrations[index]
        let reply = try await broker.post("/auth/register", body: Array(body.utf8), contentType: "application/json")
        #expect(reply.status == 400 && reply.error == "invalid_request", "\(broker.layer): \(body)")
        #expect(reply.errorDescription.contains(says), "\(broker.layer): \(body): \(reply.errorDescription)")
        #expect(try await broker.login("x@example.com", "correct horse battery").status == 401, "nothing was created")
    }

    /// 8–128 characters; an address registers once, whatever its case and spaces.
    package static func passwordLengthBounds(_ broker: EndpointClient) async throws {
        let long = String(repeating: "ab", count: 64) + "c"
        let tooLong = try await broker.register("long@example.com", long)
        #expect(tooLong.status == 400 && tooLong.errorDescription.contains("at most 128"), "\(broker.layer)")
        let longest = try await broker.register("long@example.com", String(long.dropLast()))
        #expect(longest.status == 201, "\(broker.layer)")
        let duplicate = try await broker.register(" LONG@example.com", password)
        #expect(duplicate.status == 409 && duplicate.error == "account_exists", "\(broker.layer)")
    }

    /// Malformed bodies, types, sizes, paths and forms each get their own clear error, and change nothing.
    package static func malformedRequestsGetClearErrorsAndChangeNothing(_ broker: EndpointClient) async throws {
        let layer = broker.layer
        #expect(try await broker.register("keep@example.com", password).status == 201, "\(layer)")

        let truncated = try await broker.post(
            "/auth/login", body: Array(#"{"email": "keep@"#.utf8), contentType: "application/json")
        #expect(truncated.status == 400 && truncated.error == "invalid_request", "\(layer)")
        #expect(truncated.errorDescription.contains("malformed JSON"), "\(layer)")

        let duplicate = try await broker.post(
            "/auth/login",
            body: Array(#"{"email": "a@example.com", "email": "b@example.com", "password": "x"}"#.utf8),
            contentType: "application/json")
        #expect(duplicate.status == 400 && duplicate.errorDescription.contains("duplicate"), "\(layer)")

        let array = try await broker.post("/auth/login", body: Array("[1, 2]".utf8), contentType: "application/json")
        #expect(array.status == 400 && array.errorDescription.contains("JSON object"), "\(layer)")

        let empty = try await broker.post("/auth/register", body: [], contentType: "application/json")
        #expect(empty.status == 400 && empty.error == "invalid_request", "\(layer)")

        let wrongType = try await broker.post("/auth/login", body: Array("email=a".utf8), contentType: "text/plain")
        #expect(wrongType.status == 415 && wrongType.error == "invalid_request", "\(layer)")
        let noType = try await broker.post(
            "/auth/login", body: Array(#"{"email": "keep@example.com", "password": "x"}"#.utf8), contentType: nil)
        #expect(noType.status == 415 && noType.error == "invalid_request", "\(layer)")

        let notUTF8 = try await broker.post(
            "/auth/login", body: [0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d], contentType: "application/json")
        #expect(notUTF8.status == 400 && notUTF8.error == "invalid_request", "\(layer)")

        let deep = String(repeating: "[", count: 5000) + String(repeating: "]", count: 5000)
        let deepReply = try await broker.post("/auth/login", body: Array(deep.utf8), contentType: "application/json")
        #expect(deepReply.status == 400 && deepReply.errorDescription.contains("nesting"), "\(layer)")

        let big = try await broker.post(
            "/auth/register",
            body: Array(#"{"email": "big@example.com", "password": ""#.utf8) + [UInt8](repeating: 0x61, count: 70_000)
                + Array(#""}"#.utf8),
            contentType: "application/json")
        #expect(big.status == 413 && big.error == "payload_too_large", "\(layer)")

        let missing = try await broker.get("/auth/nothing-here")
        #expect(missing.status == 404 && missing.error == "not_found", "\(layer)")
        let wrongMethod = try await broker.get("/auth/login")
        #expect([404, 405].contains(wrongMethod.status) && wrongMethod.error != nil, "\(layer)")

        let badForm = try await broker.post(
            "/auth/token", body: Array("grant_type=refresh_token&refresh_token=%zz".utf8),
            contentType: "application/x-www-form-urlencoded")
        #expect(badForm.status == 400 && badForm.errorDescription.contains("percent"), "\(layer)")
        let repeated = try await broker.form(
            "/auth/token", [("grant_type", "refresh_token"), ("grant_type", "password")])
        #expect(repeated.status == 400 && repeated.errorDescription.contains("repeated"), "\(layer)")

        // Every error above left the account as it was, and the broker answering.
        #expect(try await broker.get("/healthz").status == 200, "\(layer)")
        #expect(try await broker.login("keep@example.com", password).status == 200, "\(layer)")
        #expect(try await broker.login("big@example.com", password).status == 401, "\(layer): nothing was created")
    }

    /// `/auth/token`'s refusals: a missing or unknown grant, each grant without what it needs, refresh tokens
    /// that were never issued.
    package static func tokenGrantErrors(_ broker: EndpointClient) async throws {
        let layer = broker.layer
        let noGrant = try await broker.form("/auth/token", [("refresh_token", "x")])
        #expect(noGrant.status == 400 && noGrant.error == "invalid_request", "\(layer)")
        for grant in ["password", "implicit", "urn:ietf:params:oauth:grant-type:saml2-bearer"] {
            let reply = try await broker.form("/auth/token", [("grant_type", grant)])
            #expect(reply.status == 400 && reply.error == "unsupported_grant_type", "\(layer): \(grant)")
        }
        // The browser flow's and the CI grants exist, and say what they lack.
        let code = try await broker.form("/auth/token", [("grant_type", "authorization_code")])
        #expect(code.status == 400 && code.error == "invalid_request", "\(layer)")
        let credentials = try await broker.form("/auth/token", [("grant_type", "client_credentials")])
        #expect(credentials.status == 401 && credentials.error == "invalid_client", "\(layer)")
        let exchange = try await broker.form(
            "/auth/token", [("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange")])
        #expect(exchange.status == 400 && exchange.error == "invalid_request", "\(layer)")
        let noToken = try await broker.form("/auth/token", [("grant_type", "refresh_token")])
        #expect(noToken.status == 400 && noToken.error == "invalid_request", "\(layer)")
        for bad in ["garbage", String(repeating: "A", count: 43), String(repeating: "A", count: 5000), "a.b.c"] {
            let reply = try await broker.form("/auth/token", [("grant_type", "refresh_token"), ("refresh_token", bad)])
            #expect(reply.status == 400 && reply.error == "invalid_grant", "\(layer): \(bad.prefix(10))")
        }
    }

    /// Discovery names `issuer`'s endpoints; the JWKS publishes the access tokens' ES256 key and the apps' RS256
    /// id-token key, public members only; the providers list and health answer.
    package static func discoveryJWKSProvidersAndHealth(
        _ broker: EndpointClient, issuer: String, passkeys: Bool
    ) async throws {
        let layer = broker.layer
        let discovery = try await broker.get("/.well-known/openid-configuration")
        #expect(discovery.status == 200, "\(layer)")
        #expect(discovery["issuer"]?.stringValue == issuer, "\(layer)")
        #expect(discovery["jwks_uri"]?.stringValue == issuer + "/.well-known/jwks.json", "\(layer)")
        #expect(discovery["token_endpoint"]?.stringValue == issuer + "/auth/token", "\(layer)")
        #expect(discovery["revocation_endpoint"]?.stringValue == issuer + "/auth/revoke", "\(layer)")
        #expect(discovery["grant_types_supported"]?.arrayValue?.contains("refresh_token") == true, "\(layer)")
        #expect(discovery["id_token_signing_alg_values_supported"] == .array(["RS256", "ES256"]), "\(layer)")
        #expect(discovery["access_token_signing_alg_values_supported"] == .array(["ES256"]), "\(layer)")

        let jwks = try await broker.get("/.well-known/jwks.json")
        let keys = try #require(jwks["keys"]?.arrayValue)
        #expect(keys.count == 2, "\(layer)")
        #expect(keys.first?["alg"] == "ES256" && keys.first?["use"] == "sig" && keys.first?["kid"] != nil, "\(layer)")
        #expect(keys.last?["alg"] == "RS256" && keys.last?["kty"] == "RSA", "\(layer)")
        #expect(keys.allSatisfy { $0["d"] == nil && $0["p"] == nil }, "\(layer): no private member is published")

        // Custom accounts always; passkeys where the broker can offer them (an https issuer or a configured
        // relying party: the in-process broker's configuration has one, a bare `broker serve` on http does not).
        var expected: [JSONValue] = [["id": "custom", "name": "Email and password", "flow": "password"]]
        if passkeys { expected.append(["id": "passkey", "name": "Passkey", "flow": "browser"]) }
        let providers = try await broker.get("/auth/providers")
        #expect(providers.json == ["providers": .array(expected)], "\(layer)")
        let health = try await broker.get("/healthz")
        #expect(health.status == 200 && health.json == ["status": "ok"], "\(layer)")
    }

    /// Registration's answer (a `custom:` UUID user id, the session fields, `no-store`), its access token (an
    /// RFC 9068 ES256 JWT by the JWKS's first key with the contract's claims), `/auth/me`, and a login with the
    /// address in another case. Returns the user id, access token and first refresh token for what a layer adds.
    package static func registerLoginAndMe(_ broker: EndpointClient, issuer: String) async throws
        -> (userID: String, access: String, refresh: String)
    {
        let layer = broker.layer
        let registered = try await broker.register("  Ada@Example.COM ", password, name: "Ada Lovelace")
        #expect(registered.status == 201, "\(layer)")
        let userID = try #require(registered["user_id"]?.stringValue)
        #expect(userID.hasPrefix("custom:"), "\(layer)")
        #expect(UUID(uuidString: String(userID.dropFirst(7))) != nil && userID == userID.lowercased(), "\(layer)")
        #expect(registered["provider"] == "custom" && registered["token_type"] == "Bearer", "\(layer)")
        #expect(registered["expires_in"] == .int(3600), "\(layer)")
        let refresh = try #require(registered["refresh_token"]?.stringValue)
        #expect(refresh.count == 43, "\(layer): 256-bit refresh token, base64url")
        #expect(registered.header("Cache-Control") == "no-store", "\(layer)")

        let access = try #require(registered["access_token"]?.stringValue)
        let header = try #require(jwtParts(access).header)
        let claims = try #require(jwtParts(access).claims)
        #expect(header["typ"] == "at+jwt" && header["alg"] == "ES256", "\(layer)")
        let jwks = try await broker.get("/.well-known/jwks.json")
        #expect(header["kid"] == jwks["keys"]?.arrayValue?.first?["kid"], "\(layer)")
        #expect(claims["iss"]?.stringValue == issuer, "\(layer)")
        #expect(claims["sub"]?.stringValue == userID, "\(layer)")
        #expect(
            claims["aud"] == "broker" && claims["idp"] == "custom" && claims["client_id"] == "broker-cli", "\(layer)")
        #expect(claims["email"] == "ada@example.com" && claims["name"] == "Ada Lovelace", "\(layer)")
        #expect(
            claims["email_verified"] == false, "\(layer): a custom address is verified only through its mailed link")
        let iat = try #require(claims["iat"]?.intValue)
        #expect(claims["exp"]?.intValue == iat + 3600 && claims["nbf"]?.intValue == iat, "\(layer)")
        #expect(claims["jti"]?.stringValue?.isEmpty == false, "\(layer)")

        let me = try await broker.get("/auth/me", bearer: access)
        #expect(me.status == 200, "\(layer)")
        #expect(
            me.json == [
                "user_id": .string(userID), "provider": "custom", "email": "ada@example.com", "name": "Ada Lovelace",
                "email_verified": false,
            ], "\(layer)")

        let login = try await broker.login("ADA@example.com", password)
        #expect(login.status == 200 && login["user_id"]?.stringValue == userID, "\(layer)")
        #expect(login["refresh_token"]?.stringValue != refresh, "\(layer)")
        return (userID, access, refresh)
    }

    /// Refresh rotation (a form body and a JSON body, RFC 6749 §6), and reuse: replaying a spent refresh token is
    /// refused and revokes its whole session — the live successor and every access token of it, no grace window —
    /// while another session of the same account is untouched. A second registration of the address is 409.
    package static func refreshRotationAndReuse(_ broker: EndpointClient) async throws {
        let layer = broker.layer
        let first = try await broker.register("rot@example.com", password)
        #expect(first.status == 201, "\(layer)")
        #expect(try await broker.register("ROT@example.com ", password).status == 409, "\(layer)")
        let refresh1 = try #require(first["refresh_token"]?.stringValue)
        let access1 = try #require(first["access_token"]?.stringValue)

        let second = try await broker.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh1)])
        #expect(second.status == 200 && second.header("Cache-Control") == "no-store", "\(layer)")
        let refresh2 = try #require(second["refresh_token"]?.stringValue)
        #expect(refresh2 != refresh1 && second["user_id"] == first["user_id"], "\(layer)")
        let third = try await broker.post(
            "/auth/token", json: ["grant_type": "refresh_token", "refresh_token": .string(refresh2)])
        #expect(third.status == 200, "\(layer)")
        let refresh3 = try #require(third["refresh_token"]?.stringValue)
        let access3 = try #require(third["access_token"]?.stringValue)
        #expect(try await broker.get("/auth/me", bearer: access3).status == 200, "\(layer)")

        let replay = try await broker.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh1)])
        #expect(replay.status == 400 && replay.error == "invalid_grant", "\(layer)")
        #expect(replay.errorDescription.contains("already used"), "\(layer)")
        let current = try await broker.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh3)])
        #expect(current.status == 400 && current.error == "invalid_grant", "\(layer)")
        #expect(current.errorDescription.contains("revoked"), "\(layer)")
        for access in [access1, access3] {
            let me = try await broker.get("/auth/me", bearer: access)
            #expect(me.status == 401 && me.error == "invalid_token", "\(layer)")
        }
        let other = try await broker.login("rot@example.com", password)
        #expect(
            try await broker.get("/auth/me", bearer: try #require(other["access_token"]?.stringValue)).status == 200,
            "\(layer): another session of the account is untouched")
    }

    /// Revocation (RFC 7009): by refresh token (with or without a hint, twice, JSON or form), by access token;
    /// unknown tokens are 200, a request without a token 400. A revoked session neither refreshes nor reaches
    /// `/auth/me`.
    package static func revocationEndsTheSession(_ broker: EndpointClient) async throws {
        let layer = broker.layer
        let session = try await broker.register("rev@example.com", password)
        let refresh = try #require(session["refresh_token"]?.stringValue)
        let access = try #require(session["access_token"]?.stringValue)
        let revoked = try await broker.form("/auth/revoke", [("token", refresh), ("token_type_hint", "refresh_token")])
        #expect(revoked.status == 200, "\(layer)")
        #expect(
            try await broker.form("/auth/revoke", [("token", refresh)]).status == 200,
            "\(layer): revoking twice is fine (RFC 7009 §2.2)")
        #expect(try await broker.post("/auth/revoke", json: ["token": "never-issued-token"]).status == 200, "\(layer)")
        let missing = try await broker.form("/auth/revoke", [("token_type_hint", "refresh_token")])
        #expect(missing.status == 400 && missing.error == "invalid_request", "\(layer)")

        let refreshAfter = try await broker.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh)])
        #expect(refreshAfter.error == "invalid_grant", "\(layer)")
        let me = try await broker.get("/auth/me", bearer: access)
        #expect(me.status == 401 && me.header("WWW-Authenticate") == "Bearer error=\"invalid_token\"", "\(layer)")

        // An access token can be revoked too; it ends its session.
        let second = try await broker.login("rev@example.com", password)
        let access2 = try #require(second["access_token"]?.stringValue)
        #expect(try await broker.form("/auth/revoke", [("token", access2)]).status == 200, "\(layer)")
        #expect(try await broker.get("/auth/me", bearer: access2).status == 401, "\(layer)")
        let refresh2 = try #require(second["refresh_token"]?.stringValue)
        let after = try await broker.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh2)])
        #expect(after.error == "invalid_grant", "\(layer)")
    }
}
