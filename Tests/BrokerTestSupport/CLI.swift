import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerStore
import BrokerSystem
package import BrokerTesting
import Foundation
import Testing

/// Runs the `broker` binary for one command.
/// The built `broker` (or `broker-full`) run to completion through BrokerTesting's one process runner.
package enum CLI {
    package typealias Result = ProcessOutput

    package static func run(
        _ arguments: [String],
        environment: [String: String] = [:],
        stdin: String? = nil,
        executable: String = BrokerProcess.binary
    ) async throws -> Result {
        try await ProcessRunner.run(
            executable, arguments, stdin: stdin.map { Array($0.utf8) }, environment: environment)
    }

    package static func openssl(_ arguments: [String]) async throws { try await ProcessRunner.openssl(arguments) }
}
