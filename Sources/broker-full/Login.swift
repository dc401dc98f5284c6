import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerProviderSchemas
import Glibc
import ProviderSupport

extension Broker {
    struct Login: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sign in and cache the session.",
            discussion: """
                custom: email + password (asked on a terminal, or --password-stdin). Without --provider:
                custom when --email is given, a choice on a terminal, else a usage error.
                Other providers: the loopback browser flow (RFC 8252 + PKCE). The sign-in URL is always
                printed on stderr and opened with $BROWSER (the URL as its last argument) or xdg-open,
                unless --no-browser; the CLI waits at most --timeout seconds for the browser to come back.
                """
        )

        @OptionGroup var client: ClientOptions

        @Option(name: .long, help: "google, facebook, microsoftaccount, twitter or custom.")
        var provider: String?

        @Option(name: .long, help: "The account's email address (custom).")
        var email: String?

        @Flag(name: .long, help: "Read the password from stdin instead of asking (custom).")
        var passwordStdin = false

        @Flag(name: .long, help: "Only print the sign-in URL; do not open a browser.")
        var noBrowser = false

        @Flag(
            name: .long,
            help: "Sign in from another device (RFC 8628): show a code and a URL (and a QR code), wait for approval.")
        var device = false

        @Option(name: .long, help: ArgumentHelp("How long to wait for the browser sign-in.", valueName: "SECONDS"))
        var timeout = 300

        func validate() throws {
            if device && (email != nil || passwordStdin) {
                throw ValidationError("--device signs in on another device: --email and --password-stdin do not apply")
            }
            if let provider { _ = try Self.providerID(provider) }
            guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
        }

        func run() async throws {
            var settings = try client.settings()
            settings.keyringMayPrompt = Terminal.isInteractive
            settings.signingIn = true
            try Register.requireKeyring(settings)
            let api = settings.api
            if device { return try await deviceSignIn(settings: settings, api: api) }
            let chosen = try await chooseProvider(api: api)
            try await Self.requireKnown(chosen, api: api)
            guard chosen == .custom else {
                let name = chosen == .passkey ? "a passkey" : await Self.displayName(chosen, api: api)
                return try await BrowserLogin(
                    provider: chosen, displayName: name, settings: settings, api: api, noBrowser: noBrowser,
                    timeout: Double(timeout)
                ).run()
            }
            let credentials = try Credentials.gather(email: email, passwordStdin: passwordStdin, confirm: false)
            try await Self.passwordSignIn(credentials, settings: settings, api: api)
        }

        /// `--device`: the code on stderr, the approval on another device, the session cached like any other.
        func deviceSignIn(settings: ClientSettings, api: BrokerAPI) async throws {
            Terminal.exitOnInterrupt()
            let signIn = DeviceSignIn(
                settings: settings, api: api, provider: provider.flatMap(ProviderID.init(rawValue:)),
                showQR: Terminal.isInteractive, presenter: BrowserLogin.ConsolePresenter())
            do {
                let session = try await signIn.run()
                Console.note("Signed in as \(session.userID) (\(settings.key)).")
            } catch {
                switch error {
                case .denied, .expired: throw CommandFailure(error.description)
                case .broker(let failure): throw ClientFailure.exit(failure, doing: "device sign-in")
                case .session(let failure): throw ClientFailure.exit(failure, settings: settings)
                }
            }
        }

        /// What a refused password sign-in says.
        static func signInFailure(_ error: BrokerAPIError, gaveCode: Bool) -> any Error {
            if case .rejected(_, .mfaEnrollmentRequired, let description) = error {
                return CommandFailure(description)
            }
            if error.isWrongPassword {
                if gaveCode, case .rejected(_, _, let description) = error, description.contains("code") {
                    return CommandFailure("wrong or already used code")
                }
                return CommandFailure("wrong email or password")
            }
            return ClientFailure.exit(error, doing: "sign-in")
        }

        /// Signs in with an email and password and caches the session (also `broker request`'s sign-in again).
        static func passwordSignIn(_ credentials: Credentials, settings: ClientSettings, api: BrokerAPI) async throws {
            let response: SessionResponse
            do {
                response = try await api.login(
                    email: credentials.email, password: credentials.password, otp: credentials.code)
            } catch {
                guard case .rejected(_, .mfaRequired, _) = error else {
                    throw Self.signInFailure(error, gaveCode: credentials.code != nil)
                }
                // The password was right; the account has a second factor.
                guard Terminal.isInteractive, let code = Terminal.ask("Code from your authenticator app: "),
                    !code.isEmpty
                else {
                    throw CommandFailure(
                        "this account has a second factor: give its code",
                        hint: "printf '%s\\n%s\\n' \"$PASSWORD\" \"$CODE\" | broker login --provider custom --email "
                            + "\(credentials.email) --password-stdin")
                }
                do {
                    response = try await api.login(
                        email: credentials.email, password: credentials.password, otp: Secret(code))
                } catch {
                    throw Self.signInFailure(error, gaveCode: true)
                }
            }
            let service = SessionService(cache: settings.credentials(), api: api, key: settings.key)
            do {
                let session = try service.store(response)
                Console.note("Signed in as \(session.userID) (\(settings.key)).")
            } catch {
                throw ClientFailure.exit(error, settings: settings)
            }
        }

        /// The providers this build knows by name: the catalog's own, `custom`, and `passkey` (a passkey on the
        /// broker's own page, through the same loopback flow as a browser provider). A broker may offer more under
        /// ids its operator chose (`"type": "oidc"`), which `broker providers` lists.
        static var knownProviders: [ProviderID] {
            BrokerProviderSchemas.all.filter { !$0.typed }.map(\.id) + [.custom, .passkey]
        }

        /// `--provider`'s id: any well-formed one (the broker says whether it offers it).
        static func providerID(_ text: String) throws(ValidationError) -> ProviderID {
            guard let id = ProviderID(rawValue: text) else {
                let known = knownProviders.map(\.rawValue).joined(separator: ", ")
                throw ValidationError(
                    "\"\(text.prefix(64))\" is not a provider id (\(known), or one broker providers lists)")
            }
            return id
        }

        /// Refuses, as a usage error, an id that is neither one this build knows nor one the broker lists (a
        /// provider its operator configured with a type). When the broker cannot be asked, it says for itself.
        static func requireKnown(_ id: ProviderID, api: BrokerAPI) async throws {
            guard !knownProviders.contains(id) else { return }
            guard let listed = try? await api.providers().list else { return }
            guard !listed.contains(where: { $0.id == id.rawValue }) else { return }
            throw CommandFailure(
                "unknown provider id \"\(id.rawValue)\" (this broker offers: "
                    + listed.map(\.id).joined(separator: ", ") + ")", status: .usage)
        }

        /// The name a provider is shown by: the catalog's for one it knows, else its id.
        static func displayName(_ id: ProviderID) -> String {
            BrokerProviderSchemas.all.first { !$0.typed && $0.id == id }?.displayName ?? id.rawValue
        }

        /// The name a provider is shown by, asking the broker for one its operator named (`"type": "oidc"`,
        /// `display_name`); the id when the broker cannot say.
        static func displayName(_ id: ProviderID, api: BrokerAPI) async -> String {
            if BrokerProviderSchemas.all.contains(where: { !$0.typed && $0.id == id }) || id == .custom {
                return displayName(id)
            }
            let listed = try? await api.providers().list
            return listed?.first { $0.id == id.rawValue }?.name ?? id.rawValue
        }

        /// `broker link`'s and `broker unlink`'s `--provider`: a provider this build knows, not `passkey` (added
        /// and removed with `broker passkey`).
        static func wayInToChange(_ provider: String) throws(ValidationError) -> ProviderID {
            if provider == ProviderID.passkey.rawValue {
                throw ValidationError("passkeys are added with broker passkey add")
            }
            return try providerID(provider)
        }

        func chooseProvider(api: BrokerAPI) async throws -> ProviderID {
            if let provider, let id = ProviderID(rawValue: provider) { return id }
            if email != nil { return .custom }
            guard Terminal.isInteractive else {
                throw CommandFailure(
                    "which provider? there is no terminal to ask",
                    hint: "broker login --provider custom --email you@example.com --password-stdin", status: .usage)
            }
            return try await Self.ask(api: api)
        }

        /// Asks on the terminal which of the broker's providers to sign in with.
        static func ask(api: BrokerAPI) async throws -> ProviderID {
            let listed: [ProviderInfo]
            do {
                listed = try await api.providers().list
            } catch {
                throw ClientFailure.exit(error, doing: "listing the providers")
            }
            let choices = listed.compactMap { info in ProviderID(rawValue: info.id).map { ($0, info.name) } }
            guard !choices.isEmpty else { throw CommandFailure("the broker offers no provider this client knows") }
            for (index, choice) in choices.enumerated() {
                Console.note("  \(index + 1). \(choice.1) (\(choice.0.rawValue))")
            }
            guard let typed = Terminal.ask("Sign in with [1-\(choices.count)]: "),
                let number = Int(typed.filter { !$0.isWhitespace }), (1...choices.count).contains(number)
            else { throw CommandFailure("no provider chosen", status: .usage) }
            return choices[number - 1].0
        }
    }
}
