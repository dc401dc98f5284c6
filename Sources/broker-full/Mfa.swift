import ArgumentParser
import BrokerClient
import BrokerCore

extension Broker {
    struct Mfa: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "mfa",
            abstract: "A second factor for a password account: an authenticator app (TOTP) and recovery codes.",
            discussion: """
                With a second factor, every password sign-in asks for the code the app shows (the CLI's, an
                app's sign-in page, the device page), and tokens say so (acr "2", amr pwd otp mfa). A recovery
                code stands in for the app once each. Every change is mailed to the account's confirmed address.
                """,
            subcommands: [TOTPCommand.self, RecoveryCodes.self, Status.self, Recover.self]
        )
    }
}

extension Broker.Mfa {
    struct Recover: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Lost the app and the recovery codes: mail a link that removes the second factor.",
            discussion: """
                The link goes to the account's confirmed address only (valid 30 minutes, once); its page asks
                for the account's password, then removes the second factor and its recovery codes and signs out
                every session. The broker answers the same whether or not the address has such an account.
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
                _ = try await settings.api.recoverSecondFactor(email: address)
            } catch {
                if case .rejected(404, .notFound, _) = error {
                    throw CommandFailure(
                        "\(settings.key.brokerURL) does not send mail: sign in with a recovery code, or ask its operator"
                    )
                }
                throw ClientFailure.exit(error, doing: "the recovery request")
            }
            Console.note(
                "If an account with a second factor uses \(address) (confirmed), a link is on its way (valid 30 "
                    + "minutes). It asks for the password.")
        }
    }
}

extension Broker.Mfa {
    struct TOTPCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "totp", abstract: "Add or remove the authenticator app.", subcommands: [Add.self, Remove.self])
    }

    /// A line asked on the terminal (or read from stdin, one per question, when it is a pipe).
    static func askCode(_ prompt: String) throws -> Secret {
        guard let typed = Terminal.ask(prompt)?.filter({ $0 != " " && $0 != "\t" && $0 != "\r" }), !typed.isEmpty else {
            throw CommandFailure("no code given; nothing was changed", status: .usage)
        }
        return Secret(typed)
    }

    static func printCodes(_ answer: JSONValue, json: Bool) {
        let codes = (answer["recovery_codes"]?.arrayValue ?? []).compactMap(\.stringValue)
        if json {
            return Console.out(JSONValue.object(["recovery_codes": .array(codes.map(JSONValue.string))]).serialized())
        }
        Console.note("Recovery codes — keep them somewhere safe; each signs in once in place of the app:")
        for code in codes { Console.out(code) }
    }
}

extension Broker.Mfa.TOTPCommand {
    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add an authenticator app: scan the QR code (or type the key), then type the code it shows.",
            discussion: """
                Signed in, the session's account is used. Without a session (or with --email) the email and
                password are asked — a broker with server.require_mfa lets no password account sign in without
                a second factor, so this is how it gets one. The key is shown once; the recovery codes printed at
                the end are too. Answers are read from the terminal, or a line each from stdin when it is a pipe.
                """)

        @OptionGroup var client: ClientOptions

        @Option(name: .long, help: "The account's email (the password is asked), instead of the session.")
        var email: String?

        @Flag(name: .long, help: "Print the recovery codes as JSON: {\"recovery_codes\": […]}.")
        var json = false

        func run() async throws {
            let settings = try client.settings()
            let api = settings.api
            let service = SessionService(cache: settings.credentials(), api: api, key: settings.key)
            var accountToken: Secret?
            var address = email
            if email == nil, (try? service.cachedSession(minValid: 0)) != nil {
                accountToken = try await Broker.Token.accountToken(settings).token
            } else if address == nil {
                guard let typed = Terminal.ask("Email: "), !typed.isEmpty else {
                    throw CommandFailure("not signed in, and no email given", status: .usage)
                }
                address = typed
            }
            var password: Secret?
            if accountToken == nil {
                guard let typed = Terminal.askSecret("Password: "), !typed.exposed.isEmpty else {
                    throw CommandFailure("no password given", status: .usage)
                }
                password = typed
            }
            let started: JSONValue
            do {
                started = try await api.beginTOTP(accountToken: accountToken, email: address, password: password)
            } catch {
                if error.isWrongPassword { throw CommandFailure("wrong email or password") }
                if case .rejected(_, let code, let description) = error, code == .conflict || code == .invalidRequest {
                    throw CommandFailure(description)
                }
                throw ClientFailure.exit(error, doing: "adding the authenticator app")
            }
            guard let uri = started["otpauth_uri"]?.stringValue, let key = started["key"]?.stringValue,
                let enrolment = started["enrolment"]?.stringValue
            else { throw CommandFailure("unexpected answer from the broker: no key to enrol") }
            Console.note("Scan this with the authenticator app:")
            if let lines = QRText.render(uri) { for line in lines { Console.note(line) } }
            Console.note("Or add it by hand — key: \(Self.grouped(key))  (time-based, SHA-1, 6 digits, 30 s)")
            Console.note("URI: \(uri)")
            let code = try Broker.Mfa.askCode("Code the app shows now: ")
            let confirmed: JSONValue
            do {
                confirmed = try await api.confirmTOTP(enrolment: enrolment, code: code)
            } catch {
                if case .rejected(_, _, let description) = error,
                    !error.isAuthenticationRefusal || error.isWrongPassword
                {
                    throw CommandFailure("not added: \(description)")
                }
                throw ClientFailure.exit(error, doing: "adding the authenticator app")
            }
            Console.note("Added. Sign-ins with the password now ask for the app's code.")
            Broker.Mfa.printCodes(confirmed, json: json)
        }

        /// The base32 key in groups of four, as people copy it.
        static func grouped(_ key: String) -> String {
            var groups: [String] = []
            var rest = Substring(key)
            while !rest.isEmpty {
                groups.append(String(rest.prefix(4)))
                rest = rest.dropFirst(4)
            }
            return groups.joined(separator: " ")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove the authenticator app and the recovery codes (the password and a code are asked).")

        @OptionGroup var client: ClientOptions

        func run() async throws {
            let settings = try client.settings()
            let (accountToken, _) = try await Broker.Token.accountToken(settings)
            guard let password = Terminal.askSecret("Password: "), !password.exposed.isEmpty else {
                throw CommandFailure("no password given", status: .usage)
            }
            let code = try Broker.Mfa.askCode("Code from the app (or a recovery code): ")
            do {
                _ = try await settings.api.removeTOTP(accountToken, password: password, code: code)
            } catch {
                if case .rejected(_, .invalidCredentials, let description) = error {
                    throw CommandFailure("not removed: \(description)")
                }
                if case .rejected(_, .notFound, let description) = error { throw CommandFailure(description) }
                throw ClientFailure.exit(error, doing: "removing the second factor")
            }
            Console.note("Removed: sign-ins with the password no longer ask for a code.")
        }
    }
}

extension Broker.Mfa {
    struct RecoveryCodes: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "recovery-codes",
            abstract: "Make new recovery codes (a code from the app is asked); the old ones stop working.")

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Print the codes as JSON: {\"recovery_codes\": […]}.")
        var json = false

        func run() async throws {
            let settings = try client.settings()
            let (accountToken, _) = try await Broker.Token.accountToken(settings)
            let code = try Broker.Mfa.askCode("Code from the app: ")
            let answer: JSONValue
            do {
                answer = try await settings.api.newRecoveryCodes(accountToken, code: code)
            } catch {
                if case .rejected(_, let status, let description) = error,
                    status == .invalidCredentials || status == .notFound
                {
                    throw CommandFailure(description)
                }
                throw ClientFailure.exit(error, doing: "making recovery codes")
            }
            Broker.Mfa.printCodes(answer, json: json)
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Whether the account has a second factor.")

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Print JSON: {\"totp\", \"totp_added_at\", \"recovery_codes_left\", \"required\"}.")
        var json = false

        func run() async throws {
            let settings = try client.settings()
            let (accountToken, _) = try await Broker.Token.accountToken(settings)
            let status: JSONValue
            do {
                status = try await settings.api.secondFactorStatus(accountToken)
            } catch {
                throw ClientFailure.exit(error, doing: "reading the second factor")
            }
            if json { return Console.out(status.serialized()) }
            if status["totp"]?.boolValue == true {
                Console.out(
                    "authenticator app: added \(status["totp_added_at"]?.stringValue ?? "")\n"
                        + "recovery codes left: \(status["recovery_codes_left"]?.intValue ?? 0)")
            } else {
                Console.out("no second factor (add one: broker mfa totp add)")
            }
            if status["required"]?.boolValue == true { Console.note("This broker requires a second factor.") }
        }
    }
}
