import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// Refresh rotation, reuse detection, revocation and `/auth/me`'s refusals, on the real server.
@Suite("sessions and access tokens", .hangBound)
struct SessionTests {
    static let password = "correct horse battery staple"

    @Test func refreshRotatesAndReuseRevokesTheWholeSession() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let first = try await server.register("rot@example.com", Self.password)
        let refresh1 = try #require(first["refresh_token"]?.stringValue)
        let access1 = try #require(first["access_token"]?.stringValue)

        // Form body (RFC 6749) and JSON body both work.
        let second = try await server.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh1)])
        #expect(second.status == 200)
        #expect(second.header("Cache-Control") == "no-store")
        let refresh2 = try #require(second["refresh_token"]?.stringValue)
        #expect(refresh2 != refresh1 && second["user_id"] == first["user_id"])
        let third = try await server.post(
            "/auth/token", json: ["grant_type": "refresh_token", "refresh_token": .string(refresh2)])
        #expect(third.status == 200)
        let refresh3 = try #require(third["refresh_token"]?.stringValue)
        let access3 = try #require(third["access_token"]?.stringValue)
        #expect(try await server.me(access3).status == 200)

        // Replaying a spent token: refused, and the whole family goes with it — no grace window.
        let replay = try await server.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh1)])
        #expect(replay.status == 400 && replay.error == "invalid_grant")
        #expect(replay["error_description"]?.stringValue?.contains("already used") == true)
        let current = try await server.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh3)])
        #expect(current.status == 400 && current.error == "invalid_grant")
        #expect(current["error_description"]?.stringValue?.contains("revoked") == true)
        for access in [access1, access3] {
            let me = try await server.me(access)
            #expect(me.status == 401 && me.error == "invalid_token")
        }
        // Another session of the same account is untouched.
        let other = try await server.login("rot@example.com", Self.password)
        #expect(try await server.me(try #require(other["access_token"]?.stringValue)).status == 200)
        #expect(server.stderr.contains("refresh token reused"))
    }

    @Test func revocationEndsTheSession() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let session = try await server.register("rev@example.com", Self.password)
        let refresh = try #require(session["refresh_token"]?.stringValue)
        let access = try #require(session["access_token"]?.stringValue)
        let revoked = try await server.form("/auth/revoke", [("token", refresh), ("token_type_hint", "refresh_token")])
        #expect(revoked.status == 200)
        let again = try await server.form("/auth/revoke", [("token", refresh)])
        #expect(again.status == 200, "revoking twice is fine (RFC 7009 §2.2)")
        let unknown = try await server.post("/auth/revoke", json: ["token": "never-issued-token"])
        #expect(unknown.status == 200)
        let missing = try await server.form("/auth/revoke", [("token_type_hint", "refresh_token")])
        #expect(missing.status == 400 && missing.error == "invalid_request")

        let refreshAfter = try await server.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh)])
        #expect(refreshAfter.error == "invalid_grant")
        let me = try await server.me(access)
        #expect(me.status == 401 && me.header("WWW-Authenticate") == "Bearer error=\"invalid_token\"")

        // An access token can be revoked too; it ends its session.
        let second = try await server.login("rev@example.com", Self.password)
        let access2 = try #require(second["access_token"]?.stringValue)
        #expect(try await server.form("/auth/revoke", [("token", access2)]).status == 200)
        #expect(try await server.me(access2).status == 401)
        let refresh2 = try #require(second["refresh_token"]?.stringValue)
        let after = try await server.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh2)])
        #expect(after.error == "invalid_grant")
    }

    @Test func meRefusesEveryBadToken() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let session = try await server.register("me@example.com", Self.password)
        let access = try #require(session["access_token"]?.stringValue)
        let parts = access.split(separator: ".").map(String.init)
        let claims = try #require(jwtParts(access).claims?.objectValue)

        // The broker's own key, unsealed from its store with its data directory's master key, to sign tokens
        // that are wrong in one way each.
        var configuration = ServerConfiguration(catalog: [])
        configuration.dataDirectory = server.dataDirectory
        let store = try SQLiteStore(path: server.dataDirectory + "/broker.sqlite3")
        let vault = KeyVault(
            store: store,
            master: try await MasterKey.load(configuration: configuration, environment: [:], store: store),
            legacyDataDirectory: nil)
        let current = try await vault.ring(now: 0).current
        let kid = current.kid
        let signer = try JWTSigner(key: current.key, kid: kid)
        let now = Int64(Date().timeIntervalSince1970)
        func signed(_ change: (inout [String: JSONValue]) -> Void, type: String = "at+jwt") throws -> String {
            var copy = claims
            change(&copy)
            return try signer.sign(claims: copy, type: type)
        }
        let stranger = try JWTSigner(key: try AsymmetricKey.generate(.ecP256), kid: kid)

        let cases: [(String, [(name: String, value: String)])] = [
            ("missing header", []),
            ("basic scheme", [(name: "Authorization", value: "Basic \(access)")]),
            ("empty bearer", [(name: "Authorization", value: "Bearer ")]),
            (
                "tampered payload",
                [
                    (
                        name: "Authorization",
                        value: "Bearer \(parts[0]).\(Base64URL.encode(Array(#"{"sub":"custom:x"}"#.utf8))).\(parts[2])"
                    )
                ]
            ),
            (
                "foreign key, same kid",
                [(name: "Authorization", value: "Bearer \(try stranger.sign(claims: claims, type: "at+jwt"))")]
            ),
            (
                "expired",
                [
                    (
                        name: "Authorization",
                        value:
                            "Bearer \(try signed { $0["exp"] = .int(now - 300); $0["iat"] = .int(now - 4000); $0["nbf"] = .int(now - 4000) })"
                    )
                ]
            ),
            ("not yet valid", [(name: "Authorization", value: "Bearer \(try signed { $0["nbf"] = .int(now + 600) })")]),
            ("wrong audience", [(name: "Authorization", value: "Bearer \(try signed { $0["aud"] = "someone-else" })")]),
            (
                "wrong issuer",
                [(name: "Authorization", value: "Bearer \(try signed { $0["iss"] = "https://evil.example" })")]
            ),
            ("wrong typ", [(name: "Authorization", value: "Bearer \(try signed({ _ in }, type: "JWT"))")]),
            ("unknown session", [(name: "Authorization", value: "Bearer \(try signed { $0["sid"] = "nope" })")]),
            (
                "alg none",
                [
                    (
                        name: "Authorization",
                        value: "Bearer \(Base64URL.encode(Array(#"{"alg":"none","typ":"at+jwt"}"#.utf8))).\(parts[1])."
                    )
                ]
            ),
            ("garbage", [(name: "Authorization", value: "Bearer not-a-jwt")]),
        ]
        for (name, headers) in cases {
            let reply = try await server.get("/auth/me", headers: headers)
            #expect(reply.status == 401, "\(name)")
            #expect(reply.error == "invalid_token", "\(name)")
            #expect(reply.header("WWW-Authenticate") == "Bearer error=\"invalid_token\"", "\(name)")
        }
        // The genuine token still works, with any case of the scheme.
        #expect(
            try await server.get("/auth/me", headers: [(name: "Authorization", value: "bearer \(access)")]).status
                == 200)
    }
}
