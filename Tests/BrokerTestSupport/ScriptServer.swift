package import BrokerSystem
import Foundation
import Glibc

/// A Python fixture server of the tests (Tests/Interop/…): started with its stdin on a pipe (closing it ends
/// the script), its one ready line read before anything else, stderr passed through.
package struct ScriptServer {
    package let process: ChildProcess
    /// The line the script printed once it was ready, without the prefix it was expected to start with.
    package let ready: String

    /// Runs `python3 SCRIPT ARGUMENTS…`; the first stdout line must start with `prefix`. Blocks this thread (call
    /// it off the cooperative pool, as `offThread`).
    package init(_ script: String, _ arguments: [String] = [], environment: [String: String] = [:], prefix: String)
        throws
    {
        process = try ChildProcess(
            "python3", [script] + arguments,
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 }, stdin: .pipe,
            stdout: .pipe, stderr: .inherit)
        guard let text = process.readOutputLine() else { throw ServerTestError("\(script) exited before it was ready") }
        guard text.hasPrefix(prefix) else { throw ServerTestError("\(script) said: \(text)") }
        ready = String(text.dropFirst(prefix.count))
    }

    /// The script's next stdout line, or `nil` when none comes within `timeout` (or the script ended). Waits in
    /// `poll(2)` for the line itself — an event, not a clock — on this thread (call it off the pool).
    package func nextLine(timeout: Duration) -> String? {
        let deadline = ContinuousClock.now + timeout
        guard let descriptor = process.output else { return nil }
        var line = [UInt8]()
        while true {
            let left = deadline - ContinuousClock.now
            guard left > .zero else { return nil }
            var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let milliseconds = Int32(min(left.components.seconds * 1000 + 1, Int64(Int32.max)))
            let ready = poll(&entry, 1, milliseconds)
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { return nil }
            var byte: UInt8 = 0
            guard read(descriptor, &byte, 1) == 1 else { return nil }
            if byte == UInt8(ascii: "\n") { return String(decoding: line, as: UTF8.self) }
            line.append(byte)
        }
    }

    /// Ends the script (it reads stdin to its end); never waits.
    package func close() { process.closeInput() }
}
