import ArgumentParser
import BrokerClient
import BrokerCore
import Glibc

/// The CLI's exit codes (CONTRACT.md "Exit codes"), as ArgumentParser wants them: ``ExitStatus``'s values.
/// Thrown as they are only where the command has already answered in its own protocol (a credential helper's
/// stdout, `exec`'s child): every failure a person reads is a ``CommandFailure``.
enum BrokerExit {
    static let failure = ExitCode(ExitStatus.failure.rawValue)
    static let authenticationRequired = ExitCode(ExitStatus.authenticationRequired.rawValue)
    static let usage = ExitCode(ExitStatus.usage.rawValue)
}

/// A command that cannot finish, as a value: what went wrong, what to run next, and the contract's exit code.
/// Commands throw it; ``Broker/main()`` prints it once (stderr, `broker:` then the message, then the hint)
/// and exits with its status.
struct CommandFailure: Error, CustomStringConvertible {
    var message: String
    var hint: String?
    var status: ExitStatus

    init(_ message: String, hint: String? = nil, status: ExitStatus = .failure) {
        self.message = message
        self.hint = hint
        self.status = status
    }

    var description: String { message }

    /// The failure a client-side error becomes when a command lets it through: its description, the code
    /// ``ExitStatus/of(_:signingIn:)`` picks. `nil` for errors that are not the client layer's (ArgumentParser's
    /// own, which it prints itself).
    static func of(_ error: any Error) -> CommandFailure? {
        switch error {
        case let failure as CommandFailure: failure
        case let error as SessionError: CommandFailure(error.description, status: ExitStatus.of(error))
        case let error as BrokerAPIError: CommandFailure(error.description, status: ExitStatus.of(error))
        case let error as ClientSettings.Problem: CommandFailure(error.description, status: ExitStatus.of(error))
        case let error as LoopbackSignIn.Failure: CommandFailure(error.description, status: ExitStatus.of(error))
        default: nil
        }
    }
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

}

/// How a token is printed (`--format`).
enum TokenFormat: String, ExpressibleByArgument, CaseIterable {
    case raw
    case json
    case header
}
