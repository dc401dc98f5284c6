import BrokerTesting
import Foundation

/// The built `broker` (or `BROKER_BIN`) run to completion through BrokerTesting's one process runner.
enum CLIRunner {
    typealias Result = ProcessOutput

    static var binary: String { TestPaths.broker }

    static func run(_ arguments: [String], stdin: String? = nil, environment: [String: String] = [:]) async throws
        -> Result
    {
        try await ProcessRunner.run(binary, arguments, stdin: stdin.map { Array($0.utf8) }, environment: environment)
    }

    static func temporaryDirectory() throws -> URL { try TemporaryDirectory.make(prefix: "broker-cli") }

    /// Runs `openssl` to make key files the way users make them.
    static func openssl(_ arguments: [String]) async throws { try await ProcessRunner.openssl(arguments) }
}
