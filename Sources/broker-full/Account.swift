import ArgumentParser
import BrokerClient
import BrokerCore

extension Broker {
    struct Account: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete the signed-in account, or export what the broker keeps about it.",
            subcommands: [Delete.self, Export.self]
        )
    }
}

extension Broker.Account {
    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete the signed-in account: its identity, password, sessions; its tokens stop working.",
            discussion: """
                A custom account confirms with its password (asked without echo, or --password-stdin). An
                account of a provider needs a sign-in of the last ten minutes: run broker login first.
                On a terminal you are asked to type the account's user id; scripts pass --yes.
                """
        )

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Read the password from stdin instead of asking (custom accounts).")
        var passwordStdin = false

        @Flag(name: .long, help: "Do not ask for confirmation.")
        var yes = false

        func run() async throws {
            let settings = try client.settings()
            let session = try await Broker.Token.session(settings, minValid: 30)
            if !yes {
                guard Terminal.isInteractive else {
                    throw CommandFailure(
                        "deleting an account cannot be undone: pass --yes when there is no terminal to ask",
                        status: .usage)
                }
                Console.warning("this deletes \(session.userID) and everything the broker keeps about it")
                guard Terminal.ask("Type the user id to confirm: ") == session.userID.description else {
                    throw CommandFailure("not confirmed; nothing was deleted")
                }
            }
            let api = settings.api
            var password: Secret?
            if try await Self.hasPassword(session, api: api, settings: settings) {
                if passwordStdin {
                    password = try Terminal.readSecretFromStdin(what: "password")
                } else if Terminal.isInteractive, let typed = Terminal.askSecret("Password: "), !typed.exposed.isEmpty {
                    password = typed
                } else {
                    throw CommandFailure(
                        "the account's password is needed (on a terminal, or --password-stdin)", status: .usage)
                }
            }
            let (accountToken, _) = try await Broker.Token.accountToken(settings)
            do {
                _ = try await api.deleteAccount(accountToken, password: password)
            } catch {
                if case .rejected(_, .invalidCredentials, _) = error {
                    throw CommandFailure("wrong password; nothing was deleted")
                }
                if case .rejected(_, .reauthenticationRequired, let description) = error {
                    throw CommandFailure("a recent sign-in is needed: \(description)")
                }
                if error.isAuthenticationRefusal {
                    try? SessionService(cache: settings.credentials(), api: api, key: settings.key).forget()
                    throw ClientFailure.exit(.rejected(settings.key, reason: error.description), settings: settings)
                }
                throw ClientFailure.exit(error, doing: "the deletion")
            }
            try? SessionService(cache: settings.credentials(), api: api, key: settings.key).forget()
            Console.note("Deleted \(session.userID); its tokens no longer work.")
        }

        /// Whether the user signs in with a password (their own account, or one linked to a provider's user):
        /// the deletion is then confirmed with it.
        static func hasPassword(_ session: Session, api: BrokerAPI, settings: ClientSettings) async throws -> Bool {
            if session.provider == .custom { return true }
            do {
                let listed = try await api.identities(session.accessToken)["identities"]?.arrayValue ?? []
                return listed.contains { $0["provider"]?.stringValue == "custom" }
            } catch {
                if error.isAuthenticationRefusal {
                    throw ClientFailure.exit(.rejected(settings.key, reason: error.description), settings: settings)
                }
                // An older broker without the list: only its own custom accounts have a password.
                if case .rejected(404, _, _) = error { return false }
                throw ClientFailure.exit(error, doing: "the deletion")
            }
        }
    }

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print, as JSON, everything the broker keeps about the signed-in account (no secrets).")

        @OptionGroup var client: ClientOptions

        func run() async throws {
            let settings = try client.settings()
            let (accountToken, _) = try await Broker.Token.accountToken(settings)
            do {
                let document = try await settings.api.exportAccount(accountToken)
                Console.out(document.serialized())
            } catch {
                if error.isAuthenticationRefusal {
                    throw ClientFailure.exit(.rejected(settings.key, reason: error.description), settings: settings)
                }
                throw ClientFailure.exit(error, doing: "the export")
            }
        }
    }
}
