import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerServer
import BrokerStore
import BrokerTesting
import Foundation
import Testing

/// A CI platform of the tests' own: Tests/Interop/ci_issuer.py, an OIDC issuer on 127.0.0.1 that signs
/// GitHub-Actions-shaped ID tokens with joserfc. Each path prefix is a separate issuer.
package final class CIIssuer: @unchecked Sendable {
    package let server: ScriptServer
    package var base: String { server.ready }

    package init() throws {
        server = try ScriptServer(
            BrokerProcess.repositoryRoot.appendingPathComponent("Tests/Interop/ci_issuer.py").path,
            prefix: "issuer-base ")
    }

    package static func start() async throws -> CIIssuer { try await offThread { try CIIssuer() } }

    package func issuer(_ tenant: String) -> String { "\(base)/\(tenant)" }

    /// A signed token from `tenant`; `query` as ci_issuer.py documents (sub, aud, iss, iat, nbf, exp, alg,
    /// variant, jti).
    package func token(_ tenant: String = "gha", _ query: [(String, String)] = []) async throws -> String {
        let url = "\(base)/\(tenant)/token?" + FormEncoding.encode(query)
        let response = try await HTTPClient.shared.send(HTTPClientRequest(url: url))
        guard response.status == 200 else { throw ServerTestError("ci_issuer.py token: \(response.status)") }
        return response.bodyText
    }

    package func rotate(_ tenant: String) async throws {
        _ = try await HTTPClient.shared.send(HTTPClientRequest(url: "\(base)/\(tenant)/rotate"))
    }

    /// Waits (off the pool) for the "held" tenant's discovery request to arrive: the broker is then inside the
    /// request that asked for it. `false` when none came within three minutes (a bound for a broken run).
    package func heldRequestArrived() async throws -> Bool {
        let server = self.server
        return try await offThread { server.nextLine(timeout: .seconds(180)) } == "held"
    }

    /// Lets the "held" tenant's discovery request answer.
    package func release() async throws {
        let response = try await HTTPClient.shared.send(HTTPClientRequest(url: "\(base)/release"))
        guard response.status == 200 else { throw ServerTestError("ci_issuer.py release: \(response.status)") }
    }

    package func jwksFetches(_ tenant: String) async throws -> Int64 {
        let response = try await HTTPClient.shared.send(HTTPClientRequest(url: "\(base)/stats"))
        return JSONValue.parse(response.body)?["jwks_fetches"]?[tenant]?.intValue ?? 0
    }

    // Closing stdin ends the script; never wait here (a deinit runs on whatever thread let go last).
    deinit { server.close() }
}

/// A broker with CI clients, and the CLI that mints against it.
package struct MintFixture {
    package let server: BrokerProcess
    package let issuer: CIIssuer

    package static func start(mintMaxTTL: Int = 900, httpTimeout: Int = 20) async throws -> MintFixture {
        let issuer = try await CIIssuer.start()
        let server = try await BrokerProcess.start(
            config: #"{"server": {"mint_max_ttl": \#(mintMaxTTL), "http_timeout": \#(httpTimeout)}}"#)
        return MintFixture(server: server, issuer: issuer)
    }

    /// `broker client add` on the server's store (while it runs); returns the secret.
    @discardableResult
    package func addClient(_ name: String, _ extra: [String] = []) async throws -> String {
        let result = try await CLI.run(["client", "add", name, "--json", "--data-dir", server.dataDirectory] + extra)
        guard result.status == 0, let secret = JSONValue.parse(Array(result.stdout.utf8))?["client_secret"]?.stringValue
        else { throw ServerTestError("client add \(name): \(result.status) \(result.stderr)") }
        return secret
    }

    /// A "token exchange only" client: no secret is made or printed.
    package func addTrusting(
        _ name: String, subject: String = "repo:acme/api:ref:refs/heads/*", tenant: String = "gha",
        _ extra: [String] = []
    )
        async throws
    {
        let result = try await CLI.run(
            [
                "client", "add", name, "--json", "--data-dir", server.dataDirectory, "--trust-issuer",
                issuer.issuer(tenant), "--trust-subject", subject, "--scope", "deploy",
            ] + extra)
        guard result.status == 0, let document = JSONValue.parse(Array(result.stdout.utf8)),
            document["client_id"]?.stringValue == name
        else { throw ServerTestError("client add \(name): \(result.status) \(result.stderr)") }
        #expect(document["client_secret"] == nil, "a trust client has no secret unless asked for one")
    }

    package func mint(_ arguments: [String], environment: [String: String] = [:], stdin: String? = nil) async throws
        -> CLI.Result
    {
        try await CLI.run(["mint", "--broker", server.url] + arguments, environment: environment, stdin: stdin)
    }

    /// `broker mint --subject-token-file` with `token` written to a file.
    package func exchange(_ client: String, token: String, _ extra: [String] = []) async throws -> CLI.Result {
        let file = server.directory.appendingPathComponent("oidc-\(UUID().uuidString).jwt")
        try Data(token.utf8).write(to: file)
        return try await mint(["--client-id", client, "--subject-token-file", file.path] + extra)
    }
}
