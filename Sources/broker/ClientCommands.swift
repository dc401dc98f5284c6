import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerProviders
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
            throw Console.fail(error.description, code: ExitCode(ExitStatus.of(error).rawValue))
        }
    }
}

/// Reports client-side failures with a next step for people; the exit code is ``ExitStatus/of(_:signingIn:)``'s.
enum ClientFailure {
    static func exit(_ error: SessionError, settings: ClientSettings) -> ExitCode {
        Console.error(error.description)
        let status = ExitStatus.of(error)
        if status == .authenticationRequired { Console.hint("run: \(loginCommand(settings))") }
        return ExitCode(status.rawValue)
    }

    /// `broker login` with the flags that select this session, so the hint can be pasted as it is.
    static func loginCommand(_ settings: ClientSettings) -> String {
        var command = "broker login"
        if settings.key.profile != "default" { command += " --profile \(settings.key.profile)" }
        return command
    }

    /// A failure while signing in or registering (`login`, `register`): never "authentication required".
    static func exit(_ error: BrokerAPIError, doing what: String) -> ExitCode {
        let code = ExitCode(ExitStatus.of(error, signingIn: true).rawValue)
        if case .rejected(let status, _, let description) = error, error.isTooManyRequests {
            return Console.fail(
                "\(what) refused for now: \(description.isEmpty ? "HTTP \(status)" : description)", code: code)
        }
        return Console.fail("\(what) failed: \(error)", code: code)
    }
}

/// Reads an email and password the way the contract asks: flags and stdin for scripts, prompts for people.
struct Credentials {
    var email: String
    var password: Secret

    static func gather(email: String?, passwordStdin: Bool, confirm: Bool) throws -> Credentials {
        let interactive = Terminal.isInteractive
        let address: String
        if let email {
            address = email
        } else {
            guard interactive, !passwordStdin else {
                throw Console.fail(
                    "--email is required when there is no terminal to ask (or stdin carries the password)",
                    code: BrokerExit.usage
                )
            }
            guard let typed = Terminal.ask("Email: "), !typed.isEmpty else {
                throw Console.fail("no email given", code: BrokerExit.usage)
            }
            address = typed
        }
        let password: Secret
        if passwordStdin {
            password = try Terminal.readSecretFromStdin(what: "password")
        } else if interactive {
            guard let first = Terminal.askSecret("Password: "), !first.exposed.isEmpty else {
                throw Console.fail("no password given", code: BrokerExit.usage)
            }
            if confirm {
                guard let second = Terminal.askSecret("Password (again): ") else {
                    throw Console.fail("no password given", code: BrokerExit.usage)
                }
                guard second == first else { throw Console.fail("the passwords do not match; nothing was created") }
            }
            password = first
        } else {
            Console.error("no terminal to ask for the password")
            Console.hint("pipe it in: printf '%s' \"$PASSWORD\" | broker … --password-stdin")
            throw BrokerExit.usage
        }
        return Credentials(email: address, password: password)
    }
}

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
            throw Console.fail("credential_store is \"keyring\" but " + KeyringVault.advice(failure, key: settings.key))
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
                case .mailed:
                    Console.note(
                        "Check the mail to \(credentials.email): a link to confirm the new account, or — if the address "
                            + "has one already — how to sign in. Then: broker login --provider custom --email "
                            + credentials.email)
                    return
                }
            } catch {
                if case .rejected(_, .accountExists, _) = error {
                    Console.error("an account with this email already exists at \(settings.key.brokerURL)")
                    Console.hint("sign in instead: broker login --provider custom --email \(credentials.email)")
                    throw BrokerExit.failure
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
                throw Console.fail("--resend needs --email", code: BrokerExit.usage)
            }
            do {
                _ = try await api.resendVerification(email: email)
            } catch {
                if case .rejected(404, .notFound, _) = error {
                    throw Console.fail("\(settings.key.brokerURL) does not send mail, so it cannot confirm addresses")
                }
                throw ClientFailure.exit(error, doing: "the request for a new link")
            }
            Console.note("If an unconfirmed account uses \(email), a new confirmation link is on its way.")
        }
    }

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
            if let provider, !Self.knownProviders.contains(where: { $0.rawValue == provider }) {
                let known = Self.knownProviders.map(\.rawValue).joined(separator: ", ")
                throw ValidationError("unknown provider id \"\(provider)\" (known: \(known))")
            }
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
            guard chosen == .custom else {
                let name =
                    chosen == .passkey
                    ? "a passkey" : BrokerProviders.all.first { $0.id == chosen }?.displayName ?? chosen.rawValue
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
                case .denied, .expired: throw Console.fail(error.description)
                case .broker(let failure): throw ClientFailure.exit(failure, doing: "device sign-in")
                case .session(let failure): throw ClientFailure.exit(failure, settings: settings)
                }
            }
        }

        /// Signs in with an email and password and caches the session (also `broker request`'s sign-in again).
        static func passwordSignIn(_ credentials: Credentials, settings: ClientSettings, api: BrokerAPI) async throws {
            let response: SessionResponse
            do {
                response = try await api.login(email: credentials.email, password: credentials.password)
            } catch {
                if error.isWrongPassword { throw Console.fail("wrong email or password") }
                throw ClientFailure.exit(error, doing: "sign-in")
            }
            let service = SessionService(cache: settings.credentials(), api: api, key: settings.key)
            do {
                let session = try service.store(response)
                Console.note("Signed in as \(session.userID) (\(settings.key)).")
            } catch {
                throw ClientFailure.exit(error, settings: settings)
            }
        }

        /// The providers this build knows: the catalog's, `custom`, and `passkey` (a passkey on the broker's own
        /// page, through the same loopback flow as a browser provider).
        static var knownProviders: [ProviderID] { BrokerProviders.all.map(\.id) + [.custom, .passkey] }

        func chooseProvider(api: BrokerAPI) async throws -> ProviderID {
            if let provider, let id = ProviderID(rawValue: provider) { return id }
            if email != nil { return .custom }
            guard Terminal.isInteractive else {
                Console.error("which provider? there is no terminal to ask")
                Console.hint("broker login --provider custom --email you@example.com --password-stdin")
                throw BrokerExit.usage
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
            guard !choices.isEmpty else { throw Console.fail("the broker offers no provider this client knows") }
            for (index, choice) in choices.enumerated() {
                Console.note("  \(index + 1). \(choice.1) (\(choice.0.rawValue))")
            }
            guard let typed = Terminal.ask("Sign in with [1-\(choices.count)]: "),
                let number = Int(typed.filter { !$0.isWhitespace }), (1...choices.count).contains(number)
            else { throw Console.fail("no provider chosen", code: BrokerExit.usage) }
            return choices[number - 1].0
        }
    }

    struct Token: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print an access token valid for at least --min-valid seconds, refreshing it when needed.",
            discussion: """
                Never prompts and never opens a browser: exit 4 means run `broker login`.
                As a kubectl credential plugin: command: broker, args: [token, --format, exec-credential].
                """
        )

        @OptionGroup var client: ClientOptions

        @Option(name: .long, help: ArgumentHelp("Seconds the token must still be valid.", valueName: "SECONDS"))
        var minValid: Int64 = 60

        @Option(
            name: .long, help: "raw (the JWT), header, json (the session without its refresh token), exec-credential.")
        var format: SessionTokenFormat = .raw

        func validate() throws {
            guard minValid >= 0 else { throw ValidationError("--min-valid must not be negative") }
        }

        func run() async throws {
            let settings = try client.settings()
            let session = try await Self.session(settings, minValid: minValid)
            Console.out(format.render(session, now: SystemClock().seconds()))
        }

        /// The cached session when it meets `minValid`, else one refresh (single-flight); exit 4 without one.
        static func session(_ settings: ClientSettings, minValid: Int64) async throws -> Session {
            let service = SessionService(
                cache: settings.credentials(),
                api: settings.api,
                key: settings.key
            )
            do {
                // validSession reads the store without a lock first: the cached token costs no more than that.
                return try await service.validSession(minValid: minValid)
            } catch {
                throw ClientFailure.exit(error, settings: settings)
            }
        }

        /// An account token for one account change, from the session's refresh token (the broker accepts no
        /// API access token there), and the session as stored after that refresh.
        static func accountToken(_ settings: ClientSettings) async throws -> (token: Secret, session: Session) {
            let service = SessionService(cache: settings.credentials(), api: settings.api, key: settings.key)
            do {
                return try await service.accountToken()
            } catch {
                throw ClientFailure.exit(error, settings: settings)
            }
        }
    }

    struct Exec: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run COMMAND in broker's place with a fresh token in BROKER_TOKEN and the broker in BROKER_URL.",
            discussion: """
                The command replaces broker (exec: same process id, so signals and the exit status are the
                command's own). The token is valid for at least --min-valid seconds when the command starts.
                Example: broker exec -- sh -c 'curl -H "Authorization: Bearer $BROKER_TOKEN" https://api.example.com/'
                """
        )

        @OptionGroup var client: ClientOptions

        @Option(name: .long, help: ArgumentHelp("The variable that gets the token.", valueName: "NAME"))
        var env = "BROKER_TOKEN"

        @Option(name: .long, help: ArgumentHelp("Seconds the token must still be valid.", valueName: "SECONDS"))
        var minValid: Int64 = 60

        @Argument(parsing: .postTerminator, help: "The command and its arguments, after --.")
        var command: [String] = []

        func validate() throws {
            guard !command.isEmpty else { throw ValidationError("give the command to run after --") }
            guard minValid >= 0 else { throw ValidationError("--min-valid must not be negative") }
            let name = Array(env.utf8)
            let valid =
                !name.isEmpty && !(name[0] >= UInt8(ascii: "0") && name[0] <= UInt8(ascii: "9"))
                && name.allSatisfy { byte in
                    (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                        || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                        || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "_")
                }
            guard valid, env != "BROKER_URL" else {
                throw ValidationError("--env must be a variable name (letters, digits, _) other than BROKER_URL")
            }
        }

        func run() async throws {
            let settings = try client.settings()
            let session = try await Token.session(settings, minValid: minValid)
            setenv(env, session.accessToken.exposed, 1)
            setenv("BROKER_URL", settings.key.brokerURL, 1)
            var arguments = command.map { strdup($0) } + [nil]
            execvp(command[0], &arguments)
            // Only reached when the command could not be started.
            let reason = String(cString: strerror(errno))
            unsetenv(env)
            throw Console.fail("cannot run \(command[0]): \(reason)")
        }
    }

    struct Whoami: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the signed-in user, provider, token expiry, broker and profile.",
            discussion: "Asks the broker whether the session still stands; exit 4 when signed out."
        )

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        func run() async throws {
            let settings = try client.settings()
            let api = settings.api
            let service = SessionService(cache: settings.credentials(), api: api, key: settings.key)
            var session: Session
            do {
                session = try await service.validSession(minValid: 0)
            } catch {
                if case .broker = error, let stale = (try? settings.credentials().session(for: settings.key)) ?? nil {
                    // The broker is unreachable and the token expired: still say who is cached.
                    Console.warning("could not refresh the session: \(error)")
                    session = stale
                } else {
                    throw ClientFailure.exit(error, settings: settings)
                }
            }
            var profile: JSONValue?
            do {
                var quick = api
                quick.timeout = min(quick.timeout, .seconds(5))
                profile = try await quick.me(session.accessToken)
            } catch {
                if error.isAuthenticationRefusal {
                    try? service.forget()
                    throw ClientFailure.exit(.rejected(settings.key, reason: error.description), settings: settings)
                }
                Console.warning("could not confirm the session with the broker (\(error)); showing the cached one")
            }
            // The ways in, once the broker has confirmed the session (an older broker without the endpoint: none).
            var identities: [JSONValue] = []
            if profile != nil {
                var quick = api
                quick.timeout = min(quick.timeout, .seconds(5))
                identities = (try? await quick.identities(session.accessToken))?["identities"]?.arrayValue ?? []
            }
            let now = SystemClock().seconds()
            let email = profile?["email"]?.stringValue
            let emailVerified = profile?["email_verified"]?.boolValue
            let name = profile?["name"]?.stringValue
            if json {
                var fields: [String: JSONValue] = [
                    "user_id": .string(session.userID.description),
                    "provider": .string(session.provider.rawValue),
                    "expires_at": .string(RFC3339.format(epochSeconds: session.expiresAt)),
                    "expires_in": .int(max(0, session.remaining(at: now))),
                    "broker": .string(session.key.brokerURL),
                    "profile": .string(session.key.profile),
                    "verified": .bool(profile != nil),
                    // Bound to this profile's DPoP key (a copy of the credentials file is useless without it).
                    "dpop_bound": .bool(isDPoPBound(session.accessToken)),
                    // Where the session's long-lived secrets are: "keyring" or "file".
                    "credential_store": .string(session.secretsInKeyring ? "keyring" : "file"),
                ]
                if let email { fields["email"] = .string(email) }
                if let emailVerified { fields["email_verified"] = .bool(emailVerified) }
                if let name { fields["name"] = .string(name) }
                if !identities.isEmpty { fields["identities"] = .array(identities) }
                Console.out(JSONValue.object(fields).serialized())
                return
            }
            var lines = [("user", session.userID.description)]
            if let name { lines.append(("name", name)) }
            if let email { lines.append(("email", email + (emailVerified == false ? " (not confirmed)" : ""))) }
            lines.append(("provider", session.provider.rawValue))
            if !identities.isEmpty {
                lines.append(("signs in", identities.map(Self.describe).joined(separator: ", ")))
            }
            lines += [
                ("expires", Expiry.describe(session.expiresAt, now: now)),
                ("broker", session.key.brokerURL),
                ("profile", session.key.profile),
            ]
            lines.append(
                (
                    "secrets",
                    session.secretsInKeyring
                        ? "in the desktop keyring (the access token in \(settings.home)/credentials.json)"
                        : "in \(settings.home)/credentials.json (0600)"
                ))
            if isDPoPBound(session.accessToken) {
                lines.append(("bound", "to this profile's key (\(settings.dpopKeys.location(for: session.key)))"))
            }
            for (label, value) in lines {
                Console.out(label + String(repeating: " ", count: max(1, 10 - label.count)) + value)
            }
        }

        /// One way in, as whoami lists it: `google (ada@example.com)`, `custom (ada@example.com, not confirmed)`.
        static func describe(_ identity: JSONValue) -> String {
            let provider = identity["provider"]?.stringValue ?? "?"
            var details: [String] = []
            if let email = identity["email"]?.stringValue {
                details.append(email)
            } else if let subject = identity["subject"]?.stringValue {
                details.append(subject)
            }
            if identity["email_verified"]?.boolValue == false { details.append("not confirmed") }
            return details.isEmpty ? provider : "\(provider) (\(details.joined(separator: ", ")))"
        }
    }

    struct Logout: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke the session at the broker (best effort) and delete it locally.",
            discussion: "--all signs out of every cached session, every profile and broker."
        )

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Every profile.")
        var all = false

        func run() async throws {
            let settings = try client.settings()
            var keys = [settings.key]
            if all {
                do {
                    keys = try settings.credentials().sessions().map(\.key)
                } catch {
                    throw ClientFailure.exit(.cache(error), settings: settings)
                }
                if keys.isEmpty { Console.note("No cached sessions.") }
            }
            for key in keys {
                let service = SessionService(cache: settings.credentials(), api: settings.api(for: key), key: key)
                do {
                    let (removed, problem) = try await service.logout()
                    // The session's DPoP key goes with it: the next sign-in makes a new one.
                    settings.dpopKeys.remove(key)
                    if let problem {
                        Console.warning("could not revoke at the broker (\(problem)); deleted locally anyway")
                    }
                    if let removed {
                        Console.note("Signed out \(removed.userID) (\(key)).")
                    } else if !all {
                        Console.note("Not signed in (\(key)).")
                    }
                } catch {
                    throw ClientFailure.exit(error, settings: settings)
                }
            }
        }
    }

    struct Providers: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the providers the broker has enabled.")

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Print the broker's JSON.")
        var json = false

        func run() async throws {
            let settings = try client.settings()
            let listed: (list: [ProviderInfo], document: JSONValue)
            do {
                listed = try await settings.api.providers()
            } catch {
                throw ClientFailure.exit(error, doing: "listing the providers")
            }
            if json {
                Console.out(listed.document.serialized())
                return
            }
            let width = (listed.list.map(\.id.count).max() ?? 0) + 2
            for provider in listed.list {
                let flow = provider.flow == "password" ? "email + password" : "browser"
                Console.out(
                    provider.id + String(repeating: " ", count: width - provider.id.count) + provider.name
                        + " (\(flow))"
                )
            }
        }
    }
}

/// `broker token --format`.
enum SessionTokenFormat: String, ExpressibleByArgument, CaseIterable {
    case raw
    case header
    case json
    case execCredential = "exec-credential"

    func render(_ session: Session, now: Int64) -> String {
        switch self {
        case .raw:
            return session.accessToken.exposed
        case .header:
            return "Authorization: Bearer " + session.accessToken.exposed
        case .json:
            let document: JSONValue = [
                "user_id": .string(session.userID.description),
                "provider": .string(session.provider.rawValue),
                "access_token": .string(session.accessToken.exposed),
                "token_type": "Bearer",
                "expires_at": .int(session.expiresAt),
                "expires_in": .int(max(0, session.remaining(at: now))),
                "broker": .string(session.key.brokerURL),
                "profile": .string(session.key.profile),
            ]
            return document.serialized()
        case .execCredential:
            // client.authentication.k8s.io/v1 ExecCredential: kubectl caches the token until the timestamp.
            let document: JSONValue = [
                "apiVersion": "client.authentication.k8s.io/v1",
                "kind": "ExecCredential",
                "spec": [:],
                "status": [
                    "token": .string(session.accessToken.exposed),
                    "expirationTimestamp": .string(RFC3339.format(epochSeconds: session.expiresAt)),
                ],
            ]
            return document.serialized()
        }
    }
}

/// "expires in 54 min" for people.
enum Expiry {
    static func describe(_ expiresAt: Int64, now: Int64) -> String {
        let left = expiresAt - now
        let stamp = RFC3339.format(epochSeconds: expiresAt)
        if left <= 0 { return "expired \(span(-left)) ago (\(stamp))" }
        return "in \(span(left)) (\(stamp))"
    }

    static func span(_ seconds: Int64) -> String {
        if seconds < 60 { return "\(seconds) s" }
        if seconds < 3600 { return "\(seconds / 60) min" }
        if seconds < 86_400 { return "\(seconds / 3600) h \(seconds % 3600 / 60) min" }
        return "\(seconds / 86_400) d \(seconds % 86_400 / 3600) h"
    }
}
