import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerProviderSchemas
import Glibc
import ProviderSupport

extension Broker {
    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a custom (email + password) account, sign in, and cache the session.",
            discussion: """
                On a terminal the password is asked twice without echo. Scripts pass it on stdin:
                  printf '%s' "$PASSWORD" | broker register --email me@example.com --password-stdin
                """
        )

        @OptionGroup var client: ClientOptions

        @Option(name: .long, help: "The account's email address (asked on a terminal when missing).")
        var email: String?

        @Option(name: .long, help: "A display name.")
        var name: String?

        @Flag(name: .long, help: "Read the password from stdin instead of asking.")
        var passwordStdin = false

        @Flag(name: .long, help: "Ask for a new confirmation link for --email (the account exists already).")
        var resend = false

        /// `credential_store: keyring` without a usable keyring: refused before signing in (a session that
        /// could not be kept would be lost).
        static func requireKeyring(_ settings: ClientSettings) throws {
            guard settings.credentialStore == .keyring,
                let failure = settings.vault(interactive: settings.keyringMayPrompt).availability()
            else { return }
            throw CommandFailure(
                "credential_store is \"keyring\" but " + KeyringVault.advice(failure, key: settings.key))
        }

        func run() async throws {
            var settings = try client.settings()
            // A sign-in on a terminal may ask the desktop keyring to unlock (nothing else ever waits on it).
            settings.keyringMayPrompt = Terminal.isInteractive
            settings.signingIn = true
            try Self.requireKeyring(settings)
            let api = settings.api
            if resend { return try await resendLink(settings: settings, api: api) }
            let credentials = try Credentials.gather(email: email, passwordStdin: passwordStdin, confirm: true)
            let response: SessionResponse
            let verificationSent: Bool
            do {
                switch try await api.register(email: credentials.email, password: credentials.password, name: name) {
                case .session(let session, let sent):
                    (response, verificationSent) = (session, sent)
                case .awaitingVerification(let user):
                    Console.note(
                        "Registered \(user). Confirm \(credentials.email) with the link we mailed, then sign in: "
                            + "broker login --provider custom --email \(credentials.email)")
                    return
                case .awaitingSecondFactor(let user):
                    Console.note(
                        "Registered \(user). This broker requires a second factor before the first sign-in: add one "
                            + "with broker mfa totp add --email \(credentials.email), then sign in.")
                    return
                case .mailed:
                    Console.note(
                        "Check the mail to \(credentials.email): a link to confirm the new account, or — if the address "
                            + "has one already — how to sign in. Then: broker login --provider custom --email "
                            + credentials.email)
                    return
                }
            } catch {
                if case .rejected(_, .accountExists, _) = error {
                    throw CommandFailure(
                        "an account with this email already exists at \(settings.key.brokerURL)",
                        hint: "sign in instead: broker login --provider custom --email \(credentials.email)")
                }
                throw ClientFailure.exit(error, doing: "registration")
            }
            let service = SessionService(cache: settings.credentials(), api: api, key: settings.key)
            do {
                let session = try service.store(response)
                Console.note("Registered and signed in as \(session.userID) (\(settings.key)).")
                if verificationSent { Console.note("A link to confirm \(credentials.email) is on its way.") }
            } catch {
                throw ClientFailure.exit(error, settings: settings)
            }
        }

        /// `--resend`: a new confirmation link; the broker answers the same for every address.
        func resendLink(settings: ClientSettings, api: BrokerAPI) async throws {
            guard let email, !email.isEmpty else {
                throw CommandFailure("--resend needs --email", status: .usage)
            }
            do {
                _ = try await api.resendVerification(email: email)
            } catch {
                if case .rejected(404, .notFound, _) = error {
                    throw CommandFailure("\(settings.key.brokerURL) does not send mail, so it cannot confirm addresses")
                }
                throw ClientFailure.exit(error, doing: "the request for a new link")
            }
            Console.note("If an unconfirmed account uses \(email), a new confirmation link is on its way.")
        }
    }
}
