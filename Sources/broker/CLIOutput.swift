import ArgumentParser

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The CLI's exit codes (CONTRACT.md "Exit codes").
enum BrokerExit {
    static let failure = ExitCode(1)
    static let authenticationRequired = ExitCode(4)
    static let usage = ExitCode(64)
}

/// Writes to the standard streams: data to stdout, every message to stderr.
enum Console {
    static func out(_ text: String) {
        writeAll(STDOUT_FILENO, text + "\n")
    }

    static func error(_ text: String) {
        writeAll(STDERR_FILENO, "broker: " + text + "\n")
    }

    private static func writeAll(_ fd: Int32, _ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return
            }
            bytes = bytes.dropFirst(written)
        }
    }

    /// Prints `message` on stderr and ends the command with `code`.
    static func fail(_ message: String, code: ExitCode = BrokerExit.failure) -> ExitCode {
        error(message)
        return code
    }
}

/// How a token is printed (`--format`).
enum TokenFormat: String, ExpressibleByArgument, CaseIterable {
    case raw
    case json
    case header
}
