import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// The real `broker serve` over HTTP on 127.0.0.1: every endpoint and error code of the contract.
@Suite("broker serve endpoints", .timeLimit(.minutes(10)))
struct EndpointTests {
    static let password = "correct horse battery staple"

    @Test func discoveryJWKSProvidersAndHealth() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        #expect(server.stdout == "broker listening on \(server.url)\n", "exactly one ready line on stdout")

        // The documents, as the in-process suite checks them (``EndpointContract``).
        try await EndpointContract.discoveryJWKSProvidersAndHealth(
            .process(server), issuer: server.url, passkeys: false)
        #expect(try await server.terminate() == 0, "SIGTERM ends it with 0")
    }

    @Test func registerLoginAndMe() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let registered = try await server.register("  Ada@Example.COM ", Self.password, name: "Ada Lovelace")
        #expect(registered.status == 201)
        let userID = try #require(registered["user_id"]?.stringValue)
        #expect(userID.hasPrefix("custom:"))
        #expect(UUID(uuidString: String(userID.dropFirst(7))) != nil && userID == userID.lowercased())
        #expect(registered["provider"] == "custom" && registered["token_type"] == "Bearer")
        #expect(registered["expires_in"] == .int(3600))
        let refresh = try #require(registered["refresh_token"]?.stringValue)
        #expect(refresh.count == 43, "256-bit refresh token, base64url")
        #expect(registered.header("Cache-Control") == "no-store")

        let access = try #require(registered["access_token"]?.stringValue)
        let parts = access.split(separator: ".")
        let header = try #require(jwtParts(access).header)
        let claims = try #require(jwtParts(access).claims)
        #expect(header["typ"] == "at+jwt" && header["alg"] == "ES256")
        let jwks = try await server.get("/.well-known/jwks.json")
        #expect(header["kid"] == jwks["keys"]?.arrayValue?.first?["kid"])
        #expect(claims["iss"]?.stringValue == server.url)
        #expect(claims["sub"]?.stringValue == userID)
        #expect(claims["aud"] == "broker" && claims["idp"] == "custom" && claims["client_id"] == "broker-cli")
        #expect(claims["email"] == "ada@example.com" && claims["name"] == "Ada Lovelace")
        #expect(claims["email_verified"] == false, "a custom address is verified only through its mailed link")
        let iat = try #require(claims["iat"]?.intValue)
        #expect(claims["exp"]?.intValue == iat + 3600 && claims["nbf"]?.intValue == iat)
        #expect(claims["jti"]?.stringValue?.isEmpty == false)

        let me = try await server.me(access)
        #expect(me.status == 200)
        #expect(
            me.json == [
                "user_id": .string(userID), "provider": "custom", "email": "ada@example.com", "name": "Ada Lovelace",
                "email_verified": false,
            ])

        let login = try await server.login("ADA@example.com", Self.password)
        #expect(login.status == 200 && login["user_id"]?.stringValue == userID)
        #expect(login["refresh_token"]?.stringValue != refresh)

        // Verified by code we did not write: joserfc and PyJWT, against the JWKS over HTTP.
        let verified = try await Interop.run(["verify_broker_token.py", server.url, access])
        #expect(verified.status == 0, "\(verified.stderr)")
        #expect(verified.stdout.contains(userID))

        // Nothing secret reached the log.
        let log = server.stderr
        for secret in [Self.password, access, refresh, String(parts[2])] { #expect(!log.contains(secret)) }
        #expect(try await server.terminate() == 0, "SIGTERM ends it with 0")
    }

    /// The checks written once for both layers (``EndpointContract``; in process: BrokerServerTests'
    /// `EndpointContractTests`), here against the binary; what only a process shows is added.
    @Test(arguments: EndpointContract.badRegistrations.indices)
    func registrationRefusesBadInput(case index: Int) async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        try await EndpointContract.registrationRefusesBadInput(.process(server), case: index)
    }

    @Test func passwordLengthBounds() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        try await EndpointContract.passwordLengthBounds(.process(server))
    }

    @Test func malformedRequestsGetClearErrorsAndChangeNothing() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        try await EndpointContract.malformedRequestsGetClearErrorsAndChangeNothing(.process(server))
        #expect(!server.stderr.contains("Fatal error"))
        #expect(try await server.terminate() == 0, "SIGTERM ends it with 0")
    }

    @Test func tokenGrantErrors() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        try await EndpointContract.tokenGrantErrors(.process(server))
    }
}

/// Runs the Python cross-checks in Tests/Interop.
@Suite("malformed HTTP reaches the broker as a client error")
struct MalformedHTTPTests {
    @Test(
        "bad chunked bodies answer 400 and log at debug, not 500 at error",
        .bug(id: 18, "finding 8: malformed chunked bodies answered 500 and logged at error level"),
        arguments: [
            "POST /auth/login HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
            "POST /auth/login HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n{}\r\n0\r\n\r\n",
            "POST /auth/login HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nTransfer-Encoding: xchunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        ])
    func malformedChunkedBodies(request: String) async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let result = try await ProcessRunner.python("raw_request.py", [server.url], stdin: Array(request.utf8))
        let status = result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(status == "400", "a client error, never a 500: \(status) \(result.stderr)")
        #expect(!server.stderr.contains("error :"), "nothing logged at error level: \(server.stderr.suffix(500))")
        #expect(!server.stderr.contains("request failed"))
        #expect(try await server.get("/healthz").status == 200)
    }
}
