import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerProviderSchemas
import ProviderSupport

extension Broker {
    struct Link: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Attach another way to sign in to the signed-in user.",
            discussion: """
                A browser provider: sign in with the account to link, in the browser (the same loopback flow as
                broker login); from then on that account signs in as this user. custom: choose an email and a
                password for this user (asked on a terminal, or --email and --password-stdin); a confirmation
                link is mailed when the broker sends mail. Accounts are never linked by matching emails, and an
                account that already signs in as another user is refused. The user id does not change.
                """
        )

        @OptionGroup var client: ClientOptions

        @Option(name: .long, help: "google, facebook, microsoftaccount, twitter or custom.")
        var provider: String

        @Option(name: .long, help: "The email address to sign in with (custom).")
        var email: String?

        @Flag(name: .long, help: "Read the new password from stdin instead of asking (custom).")
        var passwordStdin = false

        @Flag(name: .long, help: "Only print the sign-in URL; do not open a browser.")
        var noBrowser = false

        @Flag(name: .long, help: "Sign in with the account to link on another device (RFC 8628), like login --device.")
        var device = false

        @Option(name: .long, help: ArgumentHelp("How long to wait for the browser sign-in.", valueName: "SECONDS"))
        var timeout = 300

        func validate() throws {
            _ = try Login.wayInToChange(provider)
            guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
            if device && provider == "custom" {
                throw ValidationError("custom is linked with an email and password here, not with --device")
            }
        }

        func run() async throws {
            let settings = try client.settings()
            let api = settings.api
            let chosen = try Login.wayInToChange(provider)
            try await Login.requireKnown(chosen, api: api)
            // Adding a way in needs an account token, which only the session's refresh token gets (the broker
            // refuses an API access token here).
            let (accountToken, session) = try await Broker.Token.accountToken(settings)
            if chosen == .custom {
                return try await linkPassword(
                    session: session, accountToken: accountToken, settings: settings, api: api)
            }
            let name = await Broker.Login.displayName(chosen, api: api)
            if device {
                return try await linkOnAnotherDevice(
                    chosen, name: name, session: session, accountToken: accountToken, settings: settings)
            }
            let signIn = LoopbackSignIn(
                provider: chosen, displayName: name, settings: settings, api: api, openBrowser: !noBrowser,
                acceptPaste: noBrowser && Terminal.isInteractive, interactive: Terminal.isInteractive,
                timeout: Double(timeout), presenter: BrowserLogin.ConsolePresenter(), linkingAs: accountToken)
            let linked: Session
            do {
                linked = try await signIn.run()
            } catch {
                switch error {
                case .broker(let failure):
                    if case .rejected(_, .alreadyLinked, let description) = failure {
                        throw CommandFailure(description)
                    }
                    if case .rejected(_, .accessDenied, let description) = failure {
                        throw CommandFailure("not linked: \(description)")
                    }
                    if failure.isAuthenticationRefusal {
                        throw ClientFailure.exit(
                            .rejected(settings.key, reason: failure.description), settings: settings)
                    }
                    throw ClientFailure.exit(failure, doing: "linking")
                case .session(let failure): throw ClientFailure.exit(failure, settings: settings)
                default: throw CommandFailure("not linked: \(error.description)")
                }
            }
            // The link's sign-in started a fresh session for the same user; the one it replaced ends.
            if let old = session.refreshToken { try? await api.revoke(old) }
            await Self.reportLinked(chosen, name: name, linked: linked, api: api)
        }

        /// Says which provider account was linked (its address, or its subject), as the broker lists it.
        static func reportLinked(_ provider: ProviderID, name: String, linked: Session, api: BrokerAPI) async {
            let listed = (try? await api.identities(linked.accessToken))?["identities"]?.arrayValue ?? []
            let entry = listed.first { $0["provider"]?.stringValue == provider.rawValue }
            let which =
                entry.map { entry -> String in
                    if let email = entry["email"]?.stringValue { return " account \(email)" }
                    if let subject = entry["subject"]?.stringValue { return " account \(subject)" }
                    return ""
                } ?? ""
            Console.note("Linked the \(name)\(which): it now signs in as \(linked.userID).")
        }

        /// `--device`: the account to link signs in on another device; the CLI waits as `login --device` does.
        private func linkOnAnotherDevice(
            _ chosen: ProviderID, name: String, session: Session, accountToken: Secret, settings: ClientSettings
        ) async throws {
            let api = settings.api
            Terminal.exitOnInterrupt()
            let signIn = DeviceSignIn(
                settings: settings, api: api, provider: chosen, showQR: Terminal.isInteractive,
                presenter: BrowserLogin.ConsolePresenter(), linkingAs: accountToken)
            let linked: Session
            do {
                linked = try await signIn.run()
            } catch {
                switch error {
                case .denied: throw CommandFailure("not linked: the link was denied or refused on the other device")
                case .expired: throw CommandFailure("not linked: " + error.description)
                case .broker(let failure):
                    if case .rejected(_, .alreadyLinked, let description) = failure {
                        throw CommandFailure(description)
                    }
                    if failure.isAuthenticationRefusal {
                        throw ClientFailure.exit(
                            .rejected(settings.key, reason: failure.description), settings: settings)
                    }
                    throw ClientFailure.exit(failure, doing: "linking")
                case .session(let failure): throw ClientFailure.exit(failure, settings: settings)
                }
            }
            if let old = session.refreshToken { try? await api.revoke(old) }
            await Self.reportLinked(chosen, name: name, linked: linked, api: api)
        }

        private func linkPassword(session: Session, accountToken: Secret, settings: ClientSettings, api: BrokerAPI)
            async throws
        {
            let credentials = try Credentials.gather(email: email, passwordStdin: passwordStdin, confirm: true)
            let answer: JSONValue
            do {
                answer = try await api.linkPassword(
                    accountToken, email: credentials.email, password: credentials.password)
            } catch {
                if case .rejected(_, .accountExists, _) = error {
                    throw CommandFailure(
                        "\(credentials.email) already signs in as another user at \(settings.key.brokerURL)",
                        hint: "choose another address, or delete that account first")
                }
                if case .rejected(_, .alreadyLinked, let description) = error { throw CommandFailure(description) }
                if case .rejected(400, _, let description) = error { throw CommandFailure(description) }
                if error.isAuthenticationRefusal {
                    throw ClientFailure.exit(.rejected(settings.key, reason: error.description), settings: settings)
                }
                throw ClientFailure.exit(error, doing: "linking")
            }
            if answer["status"]?.stringValue == "accepted" {
                // The broker conceals whether the address was free (server.enumeration_protection).
                Console.note(
                    "Check the mail to \(credentials.email): a link to confirm it as a way in to \(session.userID), "
                        + "or, if the address signs in elsewhere already, a note saying so.")
                return
            }
            let email = answer["email"]?.stringValue ?? credentials.email
            Console.note("Linked \(email): it now signs in as \(session.userID).")
            if answer["verification"]?.stringValue == "sent" {
                Console.note("A link to confirm \(email) is on its way.")
            }
        }
    }
}
