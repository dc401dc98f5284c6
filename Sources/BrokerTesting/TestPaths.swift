package import Foundation

/// Where things are when tests run: the repository, the built executables, the interop scripts.
package enum TestPaths {
    /// The repository's root (this file is `Sources/BrokerTesting/TestPaths.swift`).
    package static let repositoryRoot: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// The built `broker` launcher, or `BROKER_BIN` when set.
    package static var broker: String {
        ProcessInfo.processInfo.environment["BROKER_BIN"] ?? built("broker")
    }

    /// An executable of this package in the debug build folder.
    package static func built(_ name: String) -> String {
        repositoryRoot.appendingPathComponent(".build/debug/\(name)").path
    }

    /// A script under `Tests/Interop/`.
    package static func interop(_ script: String) -> String {
        repositoryRoot.appendingPathComponent("Tests/Interop/\(script)").path
    }
}

/// Fresh directories for a test's files.
package enum TemporaryDirectory {
    /// Creates a new empty directory under the system's temporary folder.
    package static func make(prefix: String = "broker-test") throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }
}
