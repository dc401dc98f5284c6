import ArgumentParser
import BrokerClient
import BrokerCore

extension Broker {
    struct Password: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Reset a forgotten password by mail, or change it while signed in (custom accounts).",
            subcommands: [Forgot.self, Change.self]
        )
    }
}

extension Broker.Password {
    struct Forgot: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Ask the broker to mail a link that sets a new password (valid 30 minutes, once).",
            discussion: """
                The broker answers the same whether or not the address has an account; the link goes only to
                an account's own address. Opening it shows a page where the new password is chosen; every
                session of the account is then signed out. An account that signs in with passkeys only (and
                kept a confirmed address when its password went) gets a link that adds a new passkey instead.
                """
        )

        @OptionGroup var client: ClientOptions

        @Option(name: .long, help: "The account's email address (asked on a terminal when missing).")
        var email: String?

        func run() async throws {
            let settings = try client.settings()
            let address: String
            if let email {
                address = email
            } else if Terminal.isInteractive, let typed = Terminal.ask("Email: "), !typed.isEmpty {
                address = typed
            } else {
                throw CommandFailure("--email is required when there is no terminal to ask", status: .usage)
            }
            do {
                _ = try await settings.api.forgotPassword(email: address)
            } catch {
                if case .rejected(404, .notFound, _) = error {
                    throw CommandFailure("\(settings.key.brokerURL) does not send mail, so it cannot reset passwords")
                }
                throw ClientFailure.exit(error, doing: "the reset request")
            }
            Console.note(
                "If an account uses \(address), a link to choose a new password is on its way (valid 30 minutes).")
        }
    }

    struct Change: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Change the password of the signed-in custom account; other sessions are signed out.",
            discussion: """
                On a terminal the current password is asked once and the new one twice, without echo.
                Scripts give both on stdin, one per line:
                  printf '%s\\n%s\\n' "$OLD" "$NEW" | broker password change --password-stdin
                """
        )

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Read the current and the new password from stdin, one per line.")
        var passwordStdin = false

        func run() async throws {
            let settings = try client.settings()
            let session = try await Broker.Token.session(settings, minValid: 30)
            guard session.provider == .custom else {
                throw CommandFailure(
                    "this session signed in with \(session.provider.rawValue); only custom accounts have a password")
            }
            let (current, new) = try readPasswords()
            let api = settings.api
            let (accountToken, _) = try await Broker.Token.accountToken(settings)
            do {
                _ = try await api.changePassword(accountToken, current: current, new: new)
            } catch {
                if case .rejected(_, .invalidCredentials, _) = error {
                    throw CommandFailure("the current password is wrong; nothing was changed")
                }
                if case .rejected(_, .invalidRequest, let description) = error {
                    throw CommandFailure("the new password was refused: \(description)")
                }
                if error.isAuthenticationRefusal {
                    try? SessionService(cache: settings.credentials(), api: api, key: settings.key).forget()
                    throw ClientFailure.exit(.rejected(settings.key, reason: error.description), settings: settings)
                }
                throw ClientFailure.exit(error, doing: "the password change")
            }
            Console.note("Password changed; every other session of this account was signed out.")
        }

        func readPasswords() throws -> (Secret, Secret) {
            if passwordStdin {
                let text = try Terminal.readSecretFromStdin(what: "passwords").exposed
                let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map {
                    $0.hasSuffix("\r") ? String($0.dropLast()) : String($0)
                }
                guard lines.count == 2, !lines[0].isEmpty, !lines[1].isEmpty else {
                    throw CommandFailure(
                        "--password-stdin: give the current and the new password, one per line", status: .usage)
                }
                return (Secret(lines[0]), Secret(lines[1]))
            }
            guard Terminal.isInteractive else {
                throw CommandFailure(
                    "no terminal to ask for the passwords",
                    hint: "printf '%s\\n%s\\n' \"$OLD\" \"$NEW\" | broker password change --password-stdin",
                    status: .usage)
            }
            guard let current = Terminal.askSecret("Current password: "), !current.exposed.isEmpty,
                let new = Terminal.askSecret("New password: "), !new.exposed.isEmpty,
                let again = Terminal.askSecret("New password (again): ")
            else { throw CommandFailure("no password given", status: .usage) }
            guard again == new else { throw CommandFailure("the new passwords do not match; nothing was changed") }
            return (current, new)
        }
    }
}
