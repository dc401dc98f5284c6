import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// Refresh rotation, reuse detection and revocation (``EndpointContract``) and `/auth/me`'s refusals, on the real
/// server.
@Suite("sessions and access tokens", .hangBound)
struct SessionTests {
    static let password = "correct horse battery staple"

    /// Rotation and reuse as the in-process suite checks them (``EndpointContract``), and the reuse in the log.
    @Test func refreshRotatesAndReuseRevokesTheWholeSession() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        try await EndpointContract.refreshRotationAndReuse(.process(server))
        #expect(server.stderr.contains("refresh token reused"))
    }

    @Test func revocationEndsTheSession() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        try await EndpointContract.revocationEndsTheSession(.process(server))
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
