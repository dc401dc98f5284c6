import BrokerClient
package import BrokerCore
import BrokerCredentials
import BrokerCrypto
import BrokerSystem
import BrokerTesting
import Foundation
import Testing

/// One person's client: a `BROKER_HOME` of its own, pointed at one broker.
package struct ClientHome {
    package let home: String
    package let url: String

    package init(server: BrokerProcess) throws {
        try self.init(url: server.url)
    }

    /// A client of the broker at `url` (a load balancer in front of several).
    package init(url: String) throws {
        home = try BrokerProcess.temporaryDirectory().appendingPathComponent("home").path
        self.url = url
    }

    /// The client's environment: no session bus, so that no test ever touches the keyring of the desktop it
    /// runs on (a keyring test gives its own bus, ``KeyringSession/environment``).
    package var environment: [String: String] {
        [
            "BROKER_HOME": home, "BROKER_URL": url, "BROKER_PROFILE": "", "NO_COLOR": "1",
            "DBUS_SESSION_BUS_ADDRESS": "", "XDG_RUNTIME_DIR": "",
        ]
    }

    package var credentials: String { home + "/credentials.json" }

    package func run(_ arguments: [String], stdin: String? = nil, environment extra: [String: String] = [:])
        async throws -> CLI.Result
    {
        try await CLI.run(arguments, environment: environment.merging(extra) { $1 }, stdin: stdin)
    }

    @discardableResult
    package func register(
        _ email: String, password: String = "correct horse battery staple", environment extra: [String: String] = [:]
    ) async throws -> CLI.Result {
        let result = try await run(
            ["register", "--email", email, "--password-stdin"], stdin: password + "\n", environment: extra)
        #expect(result.status == 0, "\(result.stderr)")
        return result
    }

    package func cached() throws -> Session? {
        try FileTokenCache(directory: home).session(for: SessionKey(brokerURL: url, profile: "default"))
    }

    /// Makes the cached token ten minutes old, as if obtained long ago: a `--min-valid` it cannot meet
    /// then calls for a refresh (a brand-new token is handed out as it is, see `Session.satisfies`).
    package func ageSession() throws {
        let locked = try FileTokenCache(directory: home).locked()
        defer { locked.unlock() }
        var session = try #require(try locked.session(for: SessionKey(brokerURL: url, profile: "default")))
        session.obtainedAt = Int64(Date().timeIntervalSince1970) - 600
        try locked.save(session)
    }

    package func fileText() -> String { (try? String(contentsOfFile: credentials, encoding: .utf8)) ?? "" }
}

/// Counts the refresh grants the server has answered (its request log, at info level).
package func refreshRequests(_ server: BrokerProcess) -> Int {
    server.stderr.split(separator: "\n").filter { $0.contains("http.path=/auth/token") }.count
}

/// A TCP listener on 127.0.0.1 that never accepts: connections complete in the kernel's backlog, requests are
/// taken in and never answered. Closed when released.
package final class SilentListener: @unchecked Sendable {
    package let descriptor: Int32
    package let port: Int

    package init() throws { (descriptor, port) = try loopbackSocket(backlog: 16) }

    deinit { close(descriptor) }
}
