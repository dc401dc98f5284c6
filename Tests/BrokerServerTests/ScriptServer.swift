import Foundation

/// A Python fixture server of the tests (Tests/Interop/…): started with its stdin on a pipe (closing it ends
/// the script), its one ready line read before anything else, stderr passed through.
struct ScriptServer {
    let process = Process()
    let input = Pipe()
    /// The line the script printed once it was ready, without the prefix it was expected to start with.
    let ready: String

    /// Runs `python3 SCRIPT ARGUMENTS…`; the first stdout line must start with `prefix`. Blocks this thread (call
    /// it off the cooperative pool, as `offThread`).
    init(_ script: String, _ arguments: [String] = [], environment: [String: String] = [:], prefix: String) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script] + arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.standardError
        try process.run()
        var line = [UInt8]()
        while true {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            guard let first = byte.first else { throw ServerTestError("\(script) exited before it was ready") }
            if first == UInt8(ascii: "\n") { break }
            line.append(first)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard text.hasPrefix(prefix) else { throw ServerTestError("\(script) said: \(text)") }
        ready = String(text.dropFirst(prefix.count))
    }

    /// Ends the script (it reads stdin to its end); never waits.
    func close() { try? input.fileHandleForWriting.close() }
}
