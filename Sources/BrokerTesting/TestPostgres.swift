import BrokerSystem
import Foundation

/// The throw-away PostgreSQL cluster `scripts/with-postgres.sh` starts for the tests (its environment
/// variables), with a fresh database per test and the server's stop and start for fault tests.
package enum TestPostgres {
    /// `postgres://postgres@127.0.0.1:PORT/postgres`, or `nil` outside `scripts/with-postgres.sh`.
    package static var serverURL: String? { ProcessInfo.processInfo.environment["BROKER_TEST_POSTGRES"] }

    /// The superuser's password (give it to brokers as `BROKER_DATABASE_PASSWORD`).
    package static var password: String { ProcessInfo.processInfo.environment["BROKER_TEST_POSTGRES_PASSWORD"] ?? "" }

    static func requireServer() throws -> String {
        guard let url = serverURL else {
            throw TestSupportError(
                "no PostgreSQL server for this test: run it through scripts/test.sh or scripts/with-postgres.sh "
                    + "(e.g. scripts/with-postgres.sh swift test --filter Postgres)")
        }
        return url
    }

    /// Creates an empty database and returns its URL (no password in it).
    package static func freshDatabase() async throws -> String {
        let server = try requireServer()
        let name = "broker_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        try await psql(server, "CREATE DATABASE \(name)")
        let base = server.prefix { $0 != "?" }
        guard let slash = base.lastIndex(of: "/") else { throw TestSupportError("bad BROKER_TEST_POSTGRES") }
        return String(base[...slash]) + name
    }

    /// Runs SQL through `psql` (on its own thread) and returns what it printed, unaligned and tuples only.
    @discardableResult
    package static func psql(_ url: String, _ sql: String) async throws -> String {
        let output = try await ProcessRunner.run(
            "/usr/bin/psql", [url, "-v", "ON_ERROR_STOP=1", "-qAtX", "-c", sql],
            environment: ["PGPASSWORD": password, "PGCONNECT_TIMEOUT": "10"], timeout: .seconds(60))
        guard output.status == 0 else { throw TestSupportError("psql failed (\(sql)): \(output.stderr)") }
        return output.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Stops the server (fast shutdown: connections are cut, as when a database host goes away).
    package static func stopServer() async throws {
        try await pgCtl(["stop", "-m", "fast", "-w"])
    }

    /// Starts the server again with the options it was first started with.
    package static func startServer() async throws {
        let options = ProcessInfo.processInfo.environment["BROKER_TEST_PG_OPTIONS"] ?? ""
        let data = ProcessInfo.processInfo.environment["BROKER_TEST_PG_DATA"] ?? ""
        try await pgCtl(["start", "-w", "-t", "60", "-o", options, "-l", data + "/../server.log"])
    }

    private static func pgCtl(_ arguments: [String]) async throws {
        let environment = ProcessInfo.processInfo.environment
        guard let bin = environment["BROKER_TEST_PG_BIN"], let data = environment["BROKER_TEST_PG_DATA"] else {
            throw TestSupportError("no PostgreSQL cluster to control: run through scripts/with-postgres.sh")
        }
        let command = [bin + "/pg_ctl", "-D", data] + arguments
        let full = getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] + command : command
        let (status, output) = try await offThread { try spawnAndWait(full) }
        guard status == 0 else { throw TestSupportError("pg_ctl \(arguments[0]) failed (\(status)): \(output)") }
    }

    /// Runs `command` to its end with its output in a temporary file, which is returned. `pg_ctl start` leaves the
    /// server behind as a daemon: started through ``ChildProcess``, it inherits no descriptor of the tests.
    private static func spawnAndWait(_ command: [String]) throws -> (Int32, String) {
        let directory = try TemporaryDirectory.make(prefix: "broker-pgctl")
        defer { try? FileManager.default.removeItem(at: directory) }
        let output = directory.appendingPathComponent("output").path
        let child = try ChildProcess(
            command[0], Array(command.dropFirst()), stdin: .null, stdout: .file(output), stderr: .standardOutput)
        let ended = child.waitUntilExit()
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        return (ended?.exitCode ?? -1, text)
    }
}
