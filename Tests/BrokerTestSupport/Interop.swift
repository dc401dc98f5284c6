import BrokerCore
import BrokerCrypto
import BrokerHTTP
package import BrokerTesting
import Foundation
import Testing

/// The Python interop scripts (Tests/Interop/), run through BrokerTesting's process runner.
package enum Interop {
    package typealias Result = ProcessOutput

    package static func run(_ arguments: [String]) async throws -> Result {
        try await ProcessRunner.python(arguments[0], Array(arguments.dropFirst()))
    }
}
