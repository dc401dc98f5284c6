import BrokerClient
package import BrokerCore
import BrokerCredentials
import BrokerCrypto
package import BrokerHTTP
package import BrokerSystem
import BrokerTesting
package import Foundation

/// A real `broker serve` process on a free loopback port with its own data directory.
package final class BrokerProcess: @unchecked Sendable {
    package static var repositoryRoot: URL { TestPaths.repositoryRoot }

    package static var binary: String { TestPaths.broker }

    package let directory: URL
    package let dataDirectory: String
    package let process: ChildProcess
    package let stdoutPath: String
    package let stderrPath: String
    package private(set) var url = ""

    /// Launches the server; ``start(config:arguments:environment:directory:)`` also waits for its ready line.
    /// - Parameters:
    ///   - config: a configuration file's JSON text, written next to the data directory.
    ///   - directory: reuse a directory (restart on the same data).
    private init(
        config: String? = nil,
        arguments: [String] = [],
        environment: [String: String] = [:],
        directory: URL? = nil,
        wrapper: [String] = []
    ) throws {
        self.directory = try directory ?? BrokerProcess.temporaryDirectory()
        dataDirectory = self.directory.appendingPathComponent("data").path
        let stamp = UUID().uuidString.prefix(8)
        stdoutPath = self.directory.appendingPathComponent("stdout-\(stamp)").path
        stderrPath = self.directory.appendingPathComponent("stderr-\(stamp)").path
        try Data().write(to: URL(fileURLWithPath: stdoutPath))
        try Data().write(to: URL(fileURLWithPath: stderrPath))
        var args = ["serve", "--port", "0", "--data-dir", dataDirectory]
        if let config {
            let file = self.directory.appendingPathComponent("broker.json")
            try Data(config.utf8).write(to: file)
            args += ["--config", file.path]
        }
        let command = wrapper.isEmpty ? [BrokerProcess.binary] : wrapper + [BrokerProcess.binary]
        var env = ProcessInfo.processInfo.environment
        env["BROKER_LOG_LEVEL"] = "info"
        for (name, value) in environment { env[name] = value }
        process = try ChildProcess(
            command[0], Array(command.dropFirst()) + args + arguments, environment: env, stdin: .null,
            stdout: .file(stdoutPath), stderr: .file(stderrPath))
    }

    /// Starts `broker serve` and waits (without blocking a cooperative thread) for its ready line.
    /// - Parameter wrapper: a command that runs the broker (`prlimit --nofile=…`), the binary appended.
    package static func start(
        config: String? = nil,
        arguments: [String] = [],
        environment: [String: String] = [:],
        directory: URL? = nil,
        wrapper: [String] = []
    ) async throws -> BrokerProcess {
        let server = try BrokerProcess(
            config: config, arguments: arguments, environment: environment, directory: directory, wrapper: wrapper)
        try await server.waitUntilReady()
        return server
    }

    /// Three minutes: a bound for a start that is broken, not a measure of speed (a start waits for a
    /// migration another broker holds, and for cores every other suite is using).
    private func waitUntilReady() async throws {
        let deadline = Date().addingTimeInterval(180)
        while Date() < deadline {
            let text = stdout
            if let line = text.split(separator: "\n").first, text.contains("\n") {
                guard line.hasPrefix("broker listening on http://") else {
                    throw ServerTestError("unexpected ready line: \(line)")
                }
                url = String(line.dropFirst("broker listening on ".count))
                return
            }
            if let ended = process.termination {
                throw ServerTestError("broker serve exited \(ended.status): \(stderr)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        process.send(SIGTERM)
        throw ServerTestError("broker serve printed no ready line within 180 s: \(stderr)")
    }

    package var stdout: String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }
    package var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    /// Sends `signal` (SIGTERM) without waiting: for `defer`, which cannot await. The process is reaped by
    /// its ``ChildProcess`` thread; nothing here blocks a cooperative thread.
    package func stop(signal: Int32 = SIGTERM) {
        process.send(signal)
    }

    /// Sends `signal` and waits — on a thread of its own — for the exit status.
    package func terminate(signal: Int32 = SIGTERM) async throws -> Int32 {
        stop(signal: signal)
        let process = self.process
        return try await offThread { process.waitUntilExit()?.status ?? -1 }
    }

    deinit {
        // Never wait here: a deinit runs on whatever thread released the last reference.
        process.send(SIGKILL)
    }

    package static func temporaryDirectory() throws -> URL { try TemporaryDirectory.make(prefix: "broker-server") }

    // MARK: HTTP

    package struct Reply: Sendable {
        package let status: Int
        package let json: JSONValue?
        package let response: HTTPClientResponse

        package subscript(key: String) -> JSONValue? { json?[key] }
        package var error: String? { json?["error"]?.stringValue }
        package func header(_ name: String) -> String? { response.header(name) }
    }

    package func get(_ path: String, headers: [(name: String, value: String)] = []) async throws -> Reply {
        try await send(HTTPClientRequest(method: "GET", url: url + path, headers: headers))
    }

    package func post(_ path: String, json: JSONValue, headers: [(name: String, value: String)] = []) async throws
        -> Reply
    {
        try await post(path, body: Array(json.serialized().utf8), contentType: "application/json", headers: headers)
    }

    package func post(
        _ path: String,
        body: [UInt8],
        contentType: String?,
        headers: [(name: String, value: String)] = []
    ) async throws -> Reply {
        var all = headers
        if let contentType { all.append((name: "Content-Type", value: contentType)) }
        return try await send(HTTPClientRequest(method: "POST", url: url + path, headers: all, body: body))
    }

    package func form(_ path: String, _ fields: [(String, String)]) async throws -> Reply {
        try await send(HTTPClientRequest.form(url: url + path, fields: fields))
    }

    package func send(_ request: HTTPClientRequest) async throws -> Reply {
        var request = request
        request.timeout = .seconds(180)
        let response = try await HTTPClient.shared.send(request)
        return Reply(status: response.status, json: JSONValue.parse(response.body), response: response)
    }

    /// Registers an account, retrying while the hashing pool is full (429).
    package func register(_ email: String, _ password: String, name: String? = nil) async throws -> Reply {
        var body: [String: JSONValue] = ["email": .string(email), "password": .string(password)]
        if let name { body["name"] = .string(name) }
        return try await retryingBusy { try await self.post("/auth/register", json: .object(body)) }
    }

    package func login(_ email: String, _ password: String) async throws -> Reply {
        try await retryingBusy {
            try await self.post("/auth/login", json: ["email": .string(email), "password": .string(password)])
        }
    }

    package func me(_ accessToken: String) async throws -> Reply {
        try await get("/auth/me", headers: [(name: "Authorization", value: "Bearer \(accessToken)")])
    }

    /// `/auth/me` with a token the CLI in `client` holds: DPoP-bound to the profile's key, so sent as the CLI
    /// sends it — `Authorization: DPoP` with a proof by the key in the client's home, for the URL the client
    /// uses (the issuer's: a load balancer's when there is one).
    package func me(_ accessToken: String, heldBy client: ClientHome) async throws -> Reply {
        let key = try DPoPKeyStore(home: client.home).load(SessionKey(brokerURL: client.url, profile: "default"))
        guard let key, isDPoPBound(Secret(accessToken)) else { return try await me(accessToken) }
        let proof = try DPoPProof.make(
            key: key, method: "GET", url: client.url + "/auth/me", accessToken: accessToken,
            now: SystemClock().seconds())
        return try await get(
            "/auth/me", headers: [(name: "Authorization", value: "DPoP \(accessToken)"), (name: "DPoP", value: proof)])
    }
}

/// The header and claims of a compact JWS, unverified (tests look inside tokens they already trust).
package func jwtParts(_ token: String) -> (header: JSONValue?, claims: JSONValue?) {
    let parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    guard parts.count == 3 else { return (nil, nil) }
    return (Base64URL.decode(parts[0]).flatMap(JSONValue.parse), Base64URL.decode(parts[1]).flatMap(JSONValue.parse))
}

package struct ServerTestError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

/// Checks `condition` every `interval` until it holds; `false` if it still does not after `seconds`. The bound is
/// for a broken run, not a measure of speed: every test shares the machine's two cores with all the others, so
/// a start or a tick that takes a moment alone can take a minute in the parallel suite.
package func eventually(
    within seconds: Int = 180, every interval: Duration = .milliseconds(50), _ condition: () async throws -> Bool
) async throws -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while true {
        if try await condition() { return true }
        guard ContinuousClock.now < deadline else { return false }
        try await Task.sleep(for: interval)
    }
}

/// What ``retryingBusy(_:)`` reads of an answer, whichever client got it.
package protocol BusyAwareReply: Sendable {
    var status: Int { get }
    subscript(key: String) -> JSONValue? { get }
    func header(_ name: String) -> String?
}

extension BrokerProcess.Reply: BusyAwareReply {}
extension EndpointReply: BusyAwareReply {}

/// Sends again while the broker answers 429 because its hashing pool is full (not because of a throttle): a
/// process hashes with real scrypt on cores the whole suite shares. It waits as the broker's `Retry-After` asks
/// (scaled down, with jitter): a real server's back-off, not a window of the code under test.
package func retryingBusy<Reply: BusyAwareReply>(_ body: () async throws -> Reply) async throws -> Reply {
    for _ in 0..<200 {
        let reply = try await body()
        guard reply.status == 429, reply["error_description"]?.stringValue?.contains("busy") == true else {
            return reply
        }
        let wait = Double(reply.header("Retry-After") ?? "1") ?? 1
        try await Task.sleep(for: .milliseconds(Int(wait * 200) + Int.random(in: 0...200)))
    }
    throw ServerTestError("the hashing pool stayed busy")
}
