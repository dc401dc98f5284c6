import ArgumentParser
import BrokerClient
import BrokerCore
import Glibc

/// The CLI's exit codes (CONTRACT.md "Exit codes"), as ArgumentParser wants them: ``ExitStatus``'s values.
enum BrokerExit {
    static let failure = ExitCode(ExitStatus.failure.rawValue)
    static let authenticationRequired = ExitCode(ExitStatus.authenticationRequired.rawValue)
    static let usage = ExitCode(ExitStatus.usage.rawValue)
}

/// Writes to the standard streams: data to stdout, every message to stderr.
enum Console {
    // Everything printed goes through VisibleText: a broker's or provider's error_description, a user's name
    // or a pasted line cannot carry escape sequences to the terminal. Only our own styling is raw.

    static func out(_ text: String) {
        writeAll(STDOUT_FILENO, VisibleText.escape(text, keepingLines: true) + "\n")
    }

    /// Protocol output (a credential helper's answer), written exactly as given.
    static func raw(_ text: String) {
        writeAll(STDOUT_FILENO, text)
    }

    static func error(_ text: String) {
        writeAll(
            STDERR_FILENO, styled("broker:", code: "1;31") + " " + VisibleText.escape(text, keepingLines: true) + "\n")
    }

    static func warning(_ text: String) {
        writeAll(
            STDERR_FILENO, styled("broker:", code: "1;33") + " " + VisibleText.escape(text, keepingLines: true) + "\n")
    }

    /// A message for people (progress, confirmations): stderr, never stdout.
    static func note(_ text: String) {
        writeAll(STDERR_FILENO, VisibleText.escape(text, keepingLines: true) + "\n")
    }

    static func prompt(_ text: String) {
        writeAll(STDERR_FILENO, VisibleText.escape(text, keepingLines: true))
    }

    /// A hint line under an error: what to run next.
    static func hint(_ text: String) {
        writeAll(STDERR_FILENO, styled("hint:", code: "2") + " " + VisibleText.escape(text, keepingLines: true) + "\n")
    }

    /// Colour only for a person at a terminal: not when stderr is a pipe or a file, not with `NO_COLOR`
    /// set to anything non-empty (no-color.org), not on a `dumb` terminal.
    static let colour: Bool = {
        guard isatty(STDERR_FILENO) == 1 else { return false }
        if let value = getenv("NO_COLOR"), value.pointee != 0 { return false }
        if let term = getenv("TERM"), String(cString: term) == "dumb" { return false }
        return true
    }()

    static func styled(_ text: String, code: String) -> String {
        colour ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text
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
