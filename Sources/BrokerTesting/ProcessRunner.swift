import BrokerSystem
import Foundation

/// What a finished process left: its exit status and both output streams.
package struct ProcessOutput: Sendable {
    package var status: Int32
    package var stdoutBytes: [UInt8]
    package var stderr: String
    /// The process was killed because it outlived its time limit.
    package var timedOut: Bool

    package var stdout: String { String(decoding: stdoutBytes, as: UTF8.self) }
}

/// Why a test helper could not do its work.
package struct TestSupportError: Error, CustomStringConvertible, Sendable {
    package let description: String
    package init(_ description: String) { self.description = description }
}

/// Runs programs for tests: the built `broker`, `openssl`, the Python interop scripts.
///
/// Every wait happens on a thread of its own, never on Swift's cooperative pool: that pool has one thread
/// per core (two on CI), and a test that blocks one stalls every other test's continuations.
package enum ProcessRunner {
    /// Runs `executable` with `arguments` to completion.
    ///
    /// - Parameters:
    ///   - stdin: bytes given on standard input (empty input when `nil`).
    ///   - environment: variables added to (or replacing) this process's environment.
    ///   - timeout: the process is killed (SIGKILL) after this long; ``ProcessOutput/timedOut`` says so.
    package static func run(
        _ executable: String,
        _ arguments: [String],
        stdin: [UInt8]? = nil,
        environment: [String: String] = [:],
        currentDirectory: String? = nil,
        timeout: Duration = .seconds(600)
    ) async throws -> ProcessOutput {
        try await offThread {
            try runBlocking(
                executable, arguments, stdin: stdin, environment: environment, currentDirectory: currentDirectory,
                timeout: timeout)
        }
    }

    /// The blocking form, for code that already runs on a thread of its own.
    package static func runBlocking(
        _ executable: String,
        _ arguments: [String],
        stdin: [UInt8]? = nil,
        environment: [String: String] = [:],
        currentDirectory: String? = nil,
        timeout: Duration = .seconds(600)
    ) throws -> ProcessOutput {
        let directory = try TemporaryDirectory.make(prefix: "broker-run")
        defer { try? FileManager.default.removeItem(at: directory) }
        let out = directory.appendingPathComponent("out").path
        let err = directory.appendingPathComponent("err").path
        let input = directory.appendingPathComponent("in")
        try Data(stdin ?? []).write(to: input)
        var env = ProcessInfo.processInfo.environment
        for (name, value) in environment { env[name] = value }
        let child = try ChildProcess(
            executable, arguments, environment: env, directory: currentDirectory, stdin: .file(input.path),
            stdout: .file(out), stderr: .file(err))
        var ended = child.waitUntilExit(timeout: timeout)
        let killed = ended == nil
        if killed {
            child.send(SIGKILL)
            ended = child.waitUntilExit()
        }
        return ProcessOutput(
            status: ended?.exitCode ?? -1,
            stdoutBytes: Array((try? Data(contentsOf: URL(fileURLWithPath: out))) ?? Data()),
            // Decoded leniently: one byte that is not UTF-8 (a truncated character in a log line) must not turn
            // the whole stream into "" and hide what the process said.
            stderr: String(decoding: (try? Data(contentsOf: URL(fileURLWithPath: err))) ?? Data(), as: UTF8.self),
            timedOut: killed
        )
    }

    /// Runs `openssl` to make key files the way users make them; throws unless it exits 0.
    package static func openssl(_ arguments: [String]) async throws {
        let result = try await run("openssl", arguments)
        guard result.status == 0 else {
            throw TestSupportError("openssl \(arguments.joined(separator: " ")) failed: \(result.stderr)")
        }
    }

    /// Runs a Python script from `Tests/Interop/` with `python3`.
    package static func python(
        _ script: String,
        _ arguments: [String],
        stdin: [UInt8]? = nil,
        environment: [String: String] = [:]
    ) async throws -> ProcessOutput {
        try await run(
            "python3", [TestPaths.interop(script)] + arguments, stdin: stdin, environment: environment)
    }
}

/// Runs blocking work (waiting for a process, a pipe, a lock) on a thread of its own and awaits its result,
/// leaving Swift's cooperative pool free.
package func offThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DetachedThread.start { continuation.resume(with: Result { try body() }) }
    }
}
