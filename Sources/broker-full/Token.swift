import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerProviderSchemas
import BrokerServer
import Glibc
import ProviderSupport

extension Broker {
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

        @Option(
            name: .long,
            help: ArgumentHelp(
                "A token for this API alone (RFC 8707): its aud is URL, which the broker must have registered "
                    + "(broker resource add). Kept per API beside the session.", valueName: "URL"))
        var resource: String?

        func validate() throws {
            guard minValid >= 0 else { throw ValidationError("--min-valid must not be negative") }
            if let resource, let problem = ResourceIndicators.problem(resource) {
                throw ValidationError("--resource \(resource): \(problem)")
            }
        }

        func run() async throws {
            let settings = try client.settings()
            let session = try await Self.session(settings, minValid: minValid, resource: resource)
            Console.out(format.render(session, now: SystemClock().seconds()))
        }

        /// The cached session (or `resource`'s token) when it meets `minValid`, else one refresh (single-flight);
        /// exit 4 without one.
        static func session(_ settings: ClientSettings, minValid: Int64, resource: String? = nil) async throws
            -> Session
        {
            let service = SessionService(
                cache: settings.credentials(),
                api: settings.api,
                key: settings.key
            )
            do {
                // Both read the store without a lock first: the cached token costs no more than that.
                if let resource { return try await service.resourceSession(resource, minValid: minValid) }
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
}
