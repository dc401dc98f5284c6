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

    /// An executable of this package, from the build folder the running tests were built in: the test binary
    /// (`<scratch>/<configuration>/brokerPackageTests.xctest`) sits beside the products it was built with, so the
    /// debug build's tests run the debug binaries and the test command's release build its release binaries.
    package static func built(_ name: String) -> String {
        productsDirectory.appendingPathComponent(name).path
    }

    /// The folder of the running test binary (its real path: SwiftPM's `debug` and `release` are links).
    package static let productsDirectory: URL = {
        let executable =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: executable).resolvingSymlinksInPath().deletingLastPathComponent()
    }()

    /// A script under `Tests/Interop/`.
    package static func interop(_ script: String) -> String {
        repositoryRoot.appendingPathComponent("Tests/Interop/\(script)").path
    }
}

/// Fresh directories for a test's files, all under one folder of this test process's own that goes when the
/// process exits: a run makes a few hundred (brokers' data directories, client homes, SQLite stores, logs), and
/// left behind they came to gigabytes in /tmp over a day of runs. A crashed run leaves its one folder,
/// `broker-tests-PID-…`, for a look at what it was doing.
package enum TemporaryDirectory {
    /// Creates a new empty directory under this process's folder.
    package static func make(prefix: String = "broker-test") throws -> URL {
        let url = URL(fileURLWithPath: try processFolder.get()).appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// The process's folder, made (and its removal at exit arranged) the first time a directory is asked for.
    private static let processFolder: Result<String, any Error> = Result {
        let folder = FileManager.default.temporaryDirectory
            .appendingPathComponent("broker-tests-\(getpid())-\(UUID().uuidString.prefix(8))").path
        // 0755: the PostgreSQL tools run as the `postgres` user and write into folders here.
        try FileManager.default.createDirectory(
            atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        atexit {
            if case .success(let folder) = TemporaryDirectory.processFolder {
                try? FileManager.default.removeItem(atPath: folder)
            }
        }
        return folder
    }
}
