import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerSystem
import Glibc

/// Prompts on the terminal and reading secrets from stdin. Prompts go to stderr; nothing typed is echoed
/// when it is a password, and nothing read is ever printed.
enum Terminal {
    /// Ctrl-C ends a wait (a device sign-in or link) at once with exit 1: nothing is written before the
    /// approval arrives, so there is nothing to undo. Only async-signal-safe calls in the handler.
    static func exitOnInterrupt() {
        signal(SIGINT) { _ in
            let message: StaticString = "\nbroker: stopped waiting; nothing was stored\n"
            _ = write(2, message.utf8Start, message.utf8CodeUnitCount)
            _exit(1)
        }
    }

    /// Both stdin and stderr are a terminal: a person can be asked.
    static var isInteractive: Bool { isatty(STDIN_FILENO) == 1 && isatty(STDERR_FILENO) == 1 }

    static let maxSecretBytes = 4096

    /// One line typed by the user, shown as typed; `nil` at end of input.
    static func ask(_ prompt: String) -> String? {
        Console.prompt(prompt)
        return readLine(strippingNewline: true)
    }

    /// One line typed with echo off; `nil` at end of input. Ctrl-C restores the echo before exiting.
    static func askSecret(_ prompt: String) -> Secret? {
        var saved = termios()
        let hasTerminal = tcgetattr(STDIN_FILENO, &saved) == 0
        if hasTerminal {
            savedTerminal = saved
            var silent = saved
            silent.c_lflag &= ~tcflag_t(ECHO)
            silent.c_lflag |= tcflag_t(ECHONL)
            installInterruptHandlers()
            tcsetattr(STDIN_FILENO, TCSAFLUSH, &silent)
        }
        // Echo goes off before the prompt appears, so nothing typed at the prompt can be echoed.
        Console.prompt(prompt)
        defer {
            if hasTerminal {
                tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved)
                savedTerminal = nil
            }
        }
        guard let line = readLine(strippingNewline: true) else { return nil }
        return Secret(line)
    }

    /// `--password-stdin`: all of stdin, without one trailing newline (`\n` or `\r\n`).
    static func readSecretFromStdin(what: String) throws -> Secret {
        var bytes: [UInt8]
        do {
            bytes = try PosixFile.readAll(descriptor: STDIN_FILENO, name: "stdin", limit: maxSecretBytes)
        } catch {
            throw CommandFailure("cannot read the \(what) from stdin: \(error.reason)")
        }
        if bytes.count > maxSecretBytes {
            throw CommandFailure("the \(what) on stdin is longer than \(maxSecretBytes) bytes")
        }
        if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
        if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
        guard !bytes.isEmpty else { throw CommandFailure("stdin held no \(what)", status: .usage) }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw CommandFailure("the \(what) on stdin is not valid UTF-8")
        }
        return Secret(text)
    }

    /// The terminal settings to restore if a signal arrives while echo is off.
    nonisolated(unsafe) static var savedTerminal: termios?
    nonisolated(unsafe) static var handlersInstalled = false

    private static func installInterruptHandlers() {
        guard !handlersInstalled else { return }
        handlersInstalled = true
        for signalNumber in [SIGINT, SIGTERM, SIGHUP, SIGQUIT] {
            signal(signalNumber) { number in
                if var saved = Terminal.savedTerminal {
                    tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved)
                }
                let newline: [UInt8] = [0x0A]
                _ = newline.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, 1) }
                _exit(128 + number)
            }
        }
    }
}
