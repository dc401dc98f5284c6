import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerProviderSchemas
import Glibc
import ProviderSupport

/// `--broker` and `--profile`, shared by the client commands (CONTRACT.md "Options shared by the client
/// commands").
struct ClientOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "The broker's URL (env BROKER_URL; else broker_url in $BROKER_HOME/config.json; else http://127.0.0.1:8787).",
            valueName: "URL"
        )
    )
    var broker: String?

    @Option(name: .long, help: ArgumentHelp("Which cached session to use (env BROKER_PROFILE; default: default)."))
    var profile: String?

    func settings() throws -> ClientSettings {
        do {
            return try ClientSettings(broker: broker, profile: profile, environment: ClientSettings.processEnvironment)
        } catch {
            throw CommandFailure(error.description, status: ExitStatus.of(error))
        }
    }
}

/// Reports client-side failures with a next step for people; the exit code is ``ExitStatus/of(_:signingIn:)``'s.
enum ClientFailure {
    static func exit(_ error: SessionError, settings: ClientSettings) -> CommandFailure {
        let status = ExitStatus.of(error)
        return CommandFailure(
            error.description, hint: status == .authenticationRequired ? "run: \(loginCommand(settings))" : nil,
            status: status)
    }

    /// `broker login` with the flags that select this session, so the hint can be pasted as it is.
    static func loginCommand(_ settings: ClientSettings) -> String {
        var command = "broker login"
        if settings.key.profile != "default" { command += " --profile \(settings.key.profile)" }
        return command
    }

    /// A failure while signing in or registering (`login`, `register`): never "authentication required".
    static func exit(_ error: BrokerAPIError, doing what: String) -> CommandFailure {
        // A step-up (RFC 9470): the session is kept, and the broker's description says how to sign in more strongly.
        if case .rejected(_, .insufficientUserAuthentication, let description) = error {
            return CommandFailure("\(what) needs a stronger sign-in: \(description)", status: .authenticationRequired)
        }
        let code = ExitStatus.of(error, signingIn: true)
        if case .rejected(let status, _, let description) = error, error.isTooManyRequests {
            return CommandFailure(
                "\(what) refused for now: \(description.isEmpty ? "HTTP \(status)" : description)", status: code)
        }
        return CommandFailure("\(what) failed: \(error)", status: code)
    }
}

/// Reads an email and password the way the contract asks: flags and stdin for scripts, prompts for people.
struct Credentials {
    var email: String
    var password: Secret
    /// The second factor's code, when `--password-stdin` carried it on a second line.
    var code: Secret? = nil

    static func gather(email: String?, passwordStdin: Bool, confirm: Bool) throws -> Credentials {
        let interactive = Terminal.isInteractive
        let address: String
        if let email {
            address = email
        } else {
            guard interactive, !passwordStdin else {
                throw CommandFailure(
                    "--email is required when there is no terminal to ask (or stdin carries the password)",
                    status: .usage
                )
            }
            guard let typed = Terminal.ask("Email: "), !typed.isEmpty else {
                throw CommandFailure("no email given", status: .usage)
            }
            address = typed
        }
        let password: Secret
        var code: Secret?
        if passwordStdin {
            // A second line, if any, is the second factor's code: `printf '%s\n%s\n' "$PASSWORD" "$CODE"`.
            let text = try Terminal.readSecretFromStdin(what: "password").exposed
            let lines = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
            password = Secret(String(lines[0].hasSuffix("\r") ? lines[0].dropLast() : lines[0]))
            if lines.count == 2 {
                let second = lines[1].hasSuffix("\r") ? lines[1].dropLast() : lines[1]
                if !second.isEmpty { code = Secret(String(second)) }
            }
            guard !password.exposed.isEmpty else { throw CommandFailure("stdin held no password", status: .usage) }
        } else if interactive {
            guard let first = Terminal.askSecret("Password: "), !first.exposed.isEmpty else {
                throw CommandFailure("no password given", status: .usage)
            }
            if confirm {
                guard let second = Terminal.askSecret("Password (again): ") else {
                    throw CommandFailure("no password given", status: .usage)
                }
                guard second == first else { throw CommandFailure("the passwords do not match; nothing was created") }
            }
            password = first
        } else {
            throw CommandFailure(
                "no terminal to ask for the password",
                hint: "pipe it in: printf '%s' \"$PASSWORD\" | broker … --password-stdin", status: .usage)
        }
        return Credentials(email: address, password: password, code: code)
    }
}
