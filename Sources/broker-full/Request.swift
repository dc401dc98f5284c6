import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerCredentials
import BrokerCrypto
import BrokerHTTP
import BrokerProviderSchemas
import BrokerSystem
import Glibc
import ProviderSupport

extension Broker {
    /// `broker request`: one authenticated HTTP request with the cycle the classic clients were built around —
    /// attach the token; on a 401 refresh (or sign in again) and retry once.
    struct Request: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Send an HTTP request with the session's token; on a 401 refresh (or sign in again) and retry once.",
            discussion: """
                The response body goes to stdout as it arrives, byte for byte; --include writes the status line
                and headers to stderr. Exit status: 0 when a response arrived (any status, like curl), 1 with
                --fail for HTTP 400 and above, 1 for network failures, 4 when authentication could not be
                restored, 64 for usage errors (a URL the token may not go to included).

                The token goes only to https URLs (plain http only to this machine) and, when the profile's
                config.json lists "api_urls", only to URLs under one of them. Redirects are followed only with
                --location, and the token only to the origin of URL.

                When the API answers 401, the cached access token is dropped, the session refreshed (one refresh
                for every broker process that is refused at the same moment) and the request sent again with the
                same bytes. If the broker refuses the refresh, a terminal gets the sign-in of `broker login` for
                the session's provider and the request is sent once more; without a terminal, or with --no-login,
                the exit status is 4.
                """
        )

        @OptionGroup var client: ClientOptions

        @Option(name: [.customShort("X"), .long], help: "The method (default GET, or POST with a body).")
        var method: String?

        @Argument(help: "The URL (https, or http to this machine).")
        var url: String

        @Option(
            name: [.customShort("H"), .customLong("header")],
            help: ArgumentHelp("A request header (repeatable).", valueName: "Name: value"))
        var headers: [String] = []

        @Option(
            name: [.customShort("d"), .long],
            help: ArgumentHelp(
                "The body: TEXT as it is, or @FILE for a file's bytes (@- for stdin).", valueName: "DATA"))
        var data: String?

        @Flag(name: .long, help: "Read the body from stdin.")
        var dataStdin = false

        @Flag(name: [.customShort("i"), .long], help: "Write the status line and headers to stderr.")
        var include = false

        @Flag(name: [.customShort("f"), .long], help: "Exit 1 when the final status is 400 or above.")
        var fail = false

        @Flag(name: .long, help: "Never sign in interactively: exit 4 when the session cannot be refreshed.")
        var noLogin = false

        @Flag(name: [.customShort("L"), .long], help: "Follow redirects (the token only to the same origin).")
        var location = false

        @Option(name: .long, help: ArgumentHelp("Seconds the token must still be valid.", valueName: "SECONDS"))
        var minValid: Int64 = 60

        @Option(name: .long, help: ArgumentHelp("Longest time for one exchange.", valueName: "SECONDS"))
        var maxTime = 300

        @Option(
            name: .long,
            help: ArgumentHelp(
                "Send a token for this API alone (RFC 8707; default: the \"resource\" of its api_urls entry, or what "
                    + "its 401 names in resource_metadata).", valueName: "URL"))
        var resource: String?

        /// Redirects followed at most (with --location).
        static let maxRedirects = 10
        /// Largest body read from --data @FILE or stdin: it is kept in memory so that a retry sends it again.
        static let maxRequestBody = 256 * 1024 * 1024

        func validate() throws {
            if let method, !HTTPSyntax.isToken(method) {
                throw ValidationError("--method \"\(method)\" is not an HTTP method name")
            }
            for header in headers { _ = try Self.parseHeader(header) }
            if data != nil && dataStdin { throw ValidationError("give the body once: --data or --data-stdin") }
            guard minValid >= 0 else { throw ValidationError("--min-valid must not be negative") }
            guard maxTime > 0 else { throw ValidationError("--max-time must be positive") }
            if let resource, !ClientSettings.isResourceIndicator(resource) {
                throw ValidationError("--resource \(resource): an https URL (http on this machine), no fragment")
            }
        }

        /// `Name: value` → the pair; an `Authorization` header is refused (the token is broker's to attach).
        static func parseHeader(_ text: String) throws -> (name: String, value: String) {
            guard let colon = text.firstIndex(of: ":") else {
                throw ValidationError("-H \"\(text)\": expected \"Name: value\"")
            }
            let name = String(text[..<colon])
            let value = String(text[text.index(after: colon)...].drop { $0 == " " || $0 == "\t" })
            guard HTTPSyntax.isToken(name) else { throw ValidationError("-H: \"\(name)\" is not a header name") }
            guard !value.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) else {
                throw ValidationError("-H \(name): the value contains a line break")
            }
            guard name.lowercased() != "authorization" else {
                throw ValidationError("-H Authorization: broker attaches the token itself")
            }
            return (name, value)
        }

        func run() async throws {
            let settings = try client.settings()
            guard let target = APIURL(url) else {
                throw CommandFailure(
                    "\"\(url)\" is not an http(s) URL like https://api.example.com/v1/items "
                        + "(dot segments such as /../ are refused: the token's scope is checked on the path)",
                    status: .usage)
            }
            if let refusal = settings.refusal(toSendTokenTo: target) {
                throw CommandFailure(
                    "refusing to send the token: \(refusal)",
                    hint: settings.apiURLs != nil ? "add the URL to api_urls in \(settings.home)/config.json" : nil,
                    status: .usage)
            }
            let body = try readBody()
            let headerFields = try headers.map(Self.parseHeader)
            // The token's scope is checked on the URL's host; a Host header naming another would hand it to
            // another virtual host behind the same address (attack review RT2-12).
            for field in headerFields where field.name.lowercased() == "host" {
                guard let named = APIURL.authority(field.value, scheme: target.scheme), named.origin == target.origin
                else {
                    throw CommandFailure(
                        "-H Host: \"\(field.value)\" names another server than \(target.origin): the token goes only "
                            + "where the URL points", status: .usage)
                }
            }
            let chosenMethod = method ?? (body == nil ? "GET" : "POST")
            let include = include
            let location = location
            var request = AuthenticatedRequest(
                settings: settings, target: target, url: url, method: chosenMethod, headers: headerFields, body: body
            ) { final in OutputSink(include: include, final: final, location: location) }
            request.followRedirects = location
            request.maxRedirects = Self.maxRedirects
            request.timeout = .seconds(maxTime)
            if let resource { request.resource = resource }
            request.notice = { Console.warning($0) }
            if Terminal.isInteractive && !noLogin && !dataStdin && data != "@-" {
                request.signIn = { provider in try await Self.signIn(provider: provider, settings: settings) }
                request.stepUp = { need, provider in
                    try await Self.stepUp(need, provider: provider, settings: settings)
                }
            }
            let outcome: AuthenticatedRequest.Outcome
            do {
                outcome = try await request.send(minValid: minValid)
            } catch {
                switch error {
                case .signInFailed(let failure): throw failure
                case .session(let failure): throw ClientFailure.exit(failure, settings: settings)
                default: throw CommandFailure(error.description, status: error.status)
                }
            }
            if fail && outcome.response.status >= 400 {
                throw CommandFailure("\(chosenMethod) \(outcome.finalURL): HTTP \(outcome.response.status)")
            }
        }

        /// The sign-in of `broker login` for `provider` (asked for when there was no session), when the broker
        /// refused the session's refresh and a person is at the terminal.
        static func signIn(provider: ProviderID?, settings: ClientSettings) async throws {
            let api = settings.api
            let chosen: ProviderID
            if let provider {
                chosen = provider
            } else {
                chosen = try await Broker.Login.ask(api: api)
            }
            if chosen == .custom {
                let credentials = try Credentials.gather(email: nil, passwordStdin: false, confirm: false)
                try await Broker.Login.passwordSignIn(credentials, settings: settings, api: api)
            } else {
                let name = await Broker.Login.displayName(chosen, api: api)
                try await BrowserLogin(
                    provider: chosen, displayName: name, settings: settings, api: api, noBrowser: false, timeout: 300
                ).run()
            }
        }

        /// The sign-in an RFC 9470 challenge asked for, on a terminal: with two factors, the password and its code
        /// for a session started with the password, a passkey for one started with a passkey, else the person's
        /// choice of the two; otherwise the sign-in the session was started with, again. A sign-in that does not
        /// reach the level (an account with no second factor) is said, not retried.
        static func stepUp(_ need: StepUpChallenge, provider: ProviderID?, settings: ClientSettings) async throws {
            var way = provider?.identityProvider
            if need.wantsTwoFactors && way != .custom && way != .passkey {
                Console.note("  1. The password and the code from your authenticator app (custom)")
                Console.note("  2. A passkey (passkey)")
                guard let typed = Terminal.ask("Sign in with two factors [1-2]: "),
                    let number = Int(typed.filter { !$0.isWhitespace }), (1...2).contains(number)
                else { throw CommandFailure("no way in chosen", status: .authenticationRequired) }
                way = number == 1 ? .custom : .passkey
            }
            try await signIn(provider: way, settings: settings)
            guard need.wantsTwoFactors else { return }
            let session = try? SessionService(cache: settings.credentials(), api: settings.api, key: settings.key)
                .cachedSession(minValid: 0)
            guard let session, need.isMet(byClaims: Self.claims(of: session.accessToken), now: Int64(time(nil)))
            else {
                throw CommandFailure(
                    "signed in, but with one factor: this account has no second factor yet",
                    hint: "broker mfa totp add (or broker passkey add), then run this again",
                    status: .authenticationRequired)
            }
        }

        /// An access token's claims, read without checking its signature (the broker that just issued it vouches;
        /// only the level it says is read, to tell the person why a retry would fail).
        static func claims(of token: Secret) -> [String: JSONValue] {
            let parts = token.exposed.split(separator: ".")
            guard parts.count == 3, let payload = Base64URL.decode(parts[1]),
                case .object(let claims)? = JSONValue.parse(payload)
            else { return [:] }
            return claims
        }

        /// The body as bytes, read once: a retry sends the same bytes.
        func readBody() throws -> [UInt8]? {
            if dataStdin { return try Self.readAll(STDIN_FILENO, what: "stdin") }
            guard let data else { return nil }
            guard data.hasPrefix("@") else { return Array(data.utf8) }
            let path = String(data.dropFirst())
            if path == "-" { return try Self.readAll(STDIN_FILENO, what: "stdin") }
            do {
                return try PosixFile.read(path: PosixFile.expandingTilde(path), maxSize: Self.maxRequestBody)
            } catch {
                throw CommandFailure("--data @\(path): \(error.reason)", status: .usage)
            }
        }

        static func readAll(_ descriptor: Int32, what: String) throws -> [UInt8] {
            let bytes: [UInt8]
            do {
                bytes = try PosixFile.readAll(descriptor: descriptor, name: what, limit: maxRequestBody)
            } catch {
                throw CommandFailure("cannot read the body from \(what): \(error.reason)")
            }
            guard bytes.count <= maxRequestBody else {
                throw CommandFailure(
                    "the body from \(what) is larger than \(maxRequestBody / 1024 / 1024) MiB", status: .usage)
            }
            return bytes
        }
    }
}

/// HTTP's `token` rule (RFC 9110 §5.6.2), for method and header names.
enum HTTPSyntax {
    static func isToken(_ text: String) -> Bool {
        !text.isEmpty
            && text.utf8.allSatisfy { byte in byte.isASCIIAlphanumeric || "!#$%&'*+-.^_`|~".utf8.contains(byte) }
    }
}

/// The response body straight to stdout as it arrives; the head to stderr with --include. A 401 to the token
/// that will be answered by a retry is held back (neither shown nor written), as are the bodies of followed
/// redirects.
final class OutputSink: ResponseOutput, @unchecked Sendable {
    // Touched by the thread running one exchange at a time, between the exchanges by the command's task.
    let include: Bool
    let final: Bool
    let location: Bool
    var carriesToken = false
    private var shownHead = false

    init(include: Bool, final: Bool, location: Bool) {
        self.include = include
        self.final = final
        self.location = location
    }

    func begin(statusLine: String, status: Int, headers: [(name: String, value: String)]) -> Bool {
        shownHead = false
        if status == 401 && carriesToken && !final { return false }
        if location && [301, 302, 303, 307, 308].contains(status)
            && headers.contains(where: { $0.name.lowercased() == "location" })
        {
            return false
        }
        writeHead(statusLine: statusLine, headers: headers)
        return true
    }

    func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        var offset = 0
        while offset < bytes.count {
            let written = Glibc.write(STDOUT_FILENO, base + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += written
        }
        return true
    }

    func writeBody(_ bytes: [UInt8]) -> Bool {
        PosixFile.writeAll(bytes, to: STDOUT_FILENO)
    }

    /// The head of a response that was not streamed (no body, a redirect followed, a held-back 401).
    func showHead(of response: HTTPClientResponse) {
        if response.status == 401 && carriesToken && !final { return }
        guard !shownHead else { return }
        writeHead(statusLine: response.statusLine, headers: response.headers)
    }

    private func writeHead(statusLine: String, headers: [(name: String, value: String)]) {
        shownHead = true
        guard include else { return }
        var text = VisibleText.escape(statusLine, keepingLines: false) + "\n"
        for (name, value) in headers {
            text +=
                VisibleText.escape(name, keepingLines: false) + ": " + VisibleText.escape(value, keepingLines: false)
                + "\n"
        }
        _ = PosixFile.writeAll(Array((text + "\n").utf8), to: STDERR_FILENO)
    }
}
