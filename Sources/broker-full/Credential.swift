import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerSystem
import Glibc

extension Broker {
    struct Credential: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Credential helpers for git and docker: the session's token for the URLs in api_urls.",
            discussion: """
                Installed as git-credential-broker and docker-credential-broker (links to broker):
                  git config --global credential.https://git.example.com.helper broker
                  ~/.docker/config.json: {"credHelpers": {"registry.example.com": "broker"}}
                Only URLs listed in "api_urls" of $BROKER_HOME/config.json (the profile's list, else the
                top-level one) are answered.
                """,
            subcommands: [Git.self, Docker.self]
        )
    }
}

/// The options both helpers take before their action.
struct HelperOptions: ParsableArguments {
    @OptionGroup var client: ClientOptions

    @Option(name: .long, help: ArgumentHelp("The user name handed out with the token.", valueName: "NAME"))
    var username = CredentialHelper.defaultUsername

    func validate() throws {
        guard !username.isEmpty, !username.contains(where: { $0 == ":" || $0.isNewline || $0 == "\0" }) else {
            throw ValidationError("--username: a user name without ':' or line breaks")
        }
    }
}

/// What a helper does with the token it may hand out.
enum HelperSession {
    /// The token valid for ``CredentialHelper/minValid`` seconds (refreshed once if needed): the one for the
    /// API's `resource` when its `api_urls` entry names one (a bearer-only resource's is unbound and lives minutes:
    /// git and docker send a password, never a proof), else the session's own.
    static func session(_ settings: ClientSettings, resource: String?) async throws(SessionError) -> Session {
        let service = SessionService(
            cache: settings.credentials(), api: settings.api, key: settings.key)
        guard let resource else { return try await service.validSession(minValid: CredentialHelper.minValid) }
        return try await service.resourceSession(resource, minValid: CredentialHelper.minValid)
    }

    /// `erase`: the tool's server refused `token` (or, without one, the cached token for `resource`, else the
    /// session's); the next `get` refreshes.
    static func distrust(_ settings: ClientSettings, token: Secret?, resource: String?) throws(SessionError) {
        let service = SessionService(
            cache: settings.credentials(), api: settings.api, key: settings.key)
        try service.distrust(accessToken: token, resource: resource)
    }

    /// Says on stderr when a DPoP-bound token goes to a tool that cannot send a proof: its server will refuse it
    /// if it checks DPoP. The cure is an `api_urls` entry naming a bearer-only resource.
    static func warnIfBound(_ session: Session, url: APIURL) {
        guard isDPoPBound(session.accessToken) else { return }
        Console.warning(
            "the token for \(url.origin) is DPoP-bound and this tool cannot send a proof: register the server as a "
                + "bearer-only resource (broker resource add URL --bearer) and name it in its api_urls entry "
                + "({\"url\": …, \"resource\": URL})")
    }

    /// All of stdin (a helper's request is small; at most ``CredentialHelper/maxRequestBytes``).
    static func readStdin() throws -> String {
        let bytes: [UInt8]
        do {
            bytes = try PosixFile.readAll(
                descriptor: STDIN_FILENO, name: "stdin", limit: CredentialHelper.maxRequestBytes)
        } catch {
            throw CommandFailure("cannot read the request from stdin: \(error.reason)")
        }
        guard bytes.count <= CredentialHelper.maxRequestBytes else {
            throw CommandFailure("the request on stdin is too large")
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

enum HelperAction: String, ExpressibleByArgument, CaseIterable {
    case get, store, erase, list
}

extension Broker.Credential {
    /// git's credential-helper protocol (git-credential(1)).
    struct Git: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "git's credential helper: get answers the token, erase (after a 401) makes the next get refresh.",
            discussion: """
                git calls it as git-credential-broker get|store|erase with key=value lines on stdin.
                Hosts outside api_urls get no answer (git asks its next helper). When the session has ended
                the helper says so and tells git to stop (quit=1); run broker login.
                """
        )

        @OptionGroup var options: HelperOptions

        @Argument(help: "get, store or erase.")
        var action: HelperAction

        func validate() throws {
            guard action != .list else { throw ValidationError("git's actions are get, store and erase") }
        }

        func run() async throws {
            let settings = try options.client.settings()
            let fields = CredentialHelper.gitFields(try HelperSession.readStdin())
            guard let target = CredentialHelper.gitTarget(fields),
                settings.answersCredentials(for: target.url, hasPath: target.hasPath)
            else {
                if settings.apiURLs == nil && action == .get {
                    Console.warning(
                        "no api_urls in \(settings.home)/config.json: broker answers git only for the URLs listed there"
                    )
                }
                return
            }
            switch action {
            case .get:
                do {
                    let session = try await HelperSession.session(
                        settings, resource: settings.credentialResource(for: target.url, hasPath: target.hasPath))
                    HelperSession.warnIfBound(session, url: target.url)
                    Console.raw(CredentialHelper.gitAnswer(session, username: options.username))
                } catch {
                    // quit=1: git stops here instead of prompting for a user name and password it cannot use.
                    Console.raw("quit=1\n")
                    throw ClientFailure.exit(error, settings: settings)
                }
            case .erase:
                do {
                    try HelperSession.distrust(
                        settings, token: fields["password"].map(Secret.init),
                        resource: settings.credentialResource(for: target.url, hasPath: target.hasPath))
                } catch {
                    throw ClientFailure.exit(error, settings: settings)
                }
            case .store, .list:
                // git offers every credential that worked; the session is already broker's to keep.
                return
            }
        }
    }

    /// The docker-credential-helpers protocol.
    struct Docker: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "docker's credential helper: get answers the token for registries in api_urls.",
            discussion: """
                docker calls it as docker-credential-broker get|list|store|erase: the server URL on stdin,
                JSON on stdout. Registries outside api_urls are "credentials not found in native keychain".
                store is refused: the token comes from broker login, not from docker login.
                """
        )

        @OptionGroup var options: HelperOptions

        @Argument(help: "get, list, store or erase.")
        var action: HelperAction

        func run() async throws {
            let settings = try options.client.settings()
            switch action {
            case .list:
                var listed: [String: JSONValue] = [:]
                for url in settings.apiURLs ?? [] { listed[url.description] = .string(options.username) }
                Console.raw(JSONValue.object(listed).serialized() + "\n")
            case .store:
                _ = try HelperSession.readStdin()
                Console.raw(
                    "broker does not store registry credentials: it answers with the session's token for the "
                        + "registries in api_urls (sign in with broker login)\n")
                throw BrokerExit.failure
            case .get, .erase:
                let text = try HelperSession.readStdin()
                guard let target = CredentialHelper.dockerTarget(text),
                    settings.answersCredentials(for: target.url, hasPath: target.hasPath)
                else {
                    if action == .erase { return }
                    Console.raw(CredentialHelper.dockerNotFound + "\n")
                    throw BrokerExit.failure
                }
                let serverURL = String(text.prefix { $0 != "\n" && $0 != "\r" })
                do {
                    let resource = settings.credentialResource(for: target.url, hasPath: target.hasPath)
                    if action == .erase {
                        try HelperSession.distrust(settings, token: nil, resource: resource)
                        return
                    }
                    let session = try await HelperSession.session(settings, resource: resource)
                    HelperSession.warnIfBound(session, url: target.url)
                    Console.raw(
                        CredentialHelper.dockerAnswer(serverURL: serverURL, session, username: options.username))
                } catch {
                    // docker shows what the helper wrote on stdout; the exit status is the contract's.
                    Console.raw(error.description + "; run: \(ClientFailure.loginCommand(settings))\n")
                    throw ExitCode(ExitStatus.of(error).rawValue)
                }
            }
        }
    }
}
