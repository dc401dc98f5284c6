import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// The real `broker serve` over HTTP on 127.0.0.1: every endpoint and error code of the contract.
@Suite("broker serve endpoints", .hangBound)
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
        // The session answer, its access token and /auth/me, as the in-process suite checks them.
        let (userID, access, refresh) = try await EndpointContract.registerLoginAndMe(
            .process(server), issuer: server.url)
        let parts = access.split(separator: ".")

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
