import Foundation
package import Logging

extension Logger {
    /// The logger of a server, store or client a test runs in-process: warnings and above unless
    /// `BROKER_TEST_LOG_LEVEL` says otherwise (`info` shows every request). A whole parallel run at `info` writes
    /// hundreds of kilobytes of interleaved request lines, which bury a failure and overflow a CI log's limit.
    package static func test(_ label: String = "test") -> Logger {
        var logger = Logger(label: label)
        logger.logLevel =
            ProcessInfo.processInfo.environment["BROKER_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:))
            ?? .warning
        return logger
    }
}
