package import BrokerConfiguration
package import BrokerCore
import BrokerHTTPTypes
package import BrokerStore
import BrokerSystem
package import Logging
package import ProviderSupport

/// `broker serve`'s start, from a checked configuration and an open store to the broker's service: what it reads
/// besides the configuration (the secrets in files and the environment, the signing key, the master key, the
/// audit log), then ``BrokerService/open``, the one function that builds the service graph (the in-process tests
/// call it too, with their clock, transport and cheap hashing). The executable keeps only what is its own:
/// flags, logging, which store to open, and the line it prints once it listens.
package enum BrokerStartup {
    /// The secrets that never sit in the configuration file.
    package struct Secrets: Sendable {
        /// `GET /metrics`'s bearer token, from `server.metrics_token_file`.
        package var metricsToken: Secret?
        /// The SMTP password: `BROKER_MAIL_PASSWORD`, else `mail.password_file`.
        package var mailPassword: Secret?
    }

    /// Why the broker cannot start, as a sentence ("cannot start: …" in front).
    package struct Failure: Error, CustomStringConvertible {
        package let description: String
    }

    /// Reads the secrets the configuration points at; a file that cannot be read, or a mail user without a
    /// password, is a ``Failure`` naming the file or the keys.
    package static func secrets(_ configuration: ServerConfiguration, environment: [String: String]) throws(Failure)
        -> Secrets
    {
        var secrets = Secrets()
        if let file = configuration.metricsTokenFile {
            let path = PosixFile.expandingTilde(file)
            do {
                secrets.metricsToken = Secret(try PosixFile.readSecret(path: path))
            } catch {
                throw Failure(description: "cannot read the metrics token file \(path): \(error.reason)")
            }
        }
        guard let mail = configuration.mail else { return secrets }
        if let value = environment["BROKER_MAIL_PASSWORD"], !value.isEmpty {
            secrets.mailPassword = Secret(value)
        } else if let path = mail.passwordFile.map(PosixFile.expandingTilde) {
            do {
                secrets.mailPassword = Secret(try PosixFile.readSecret(path: path))
            } catch {
                throw Failure(description: "cannot read mail.password_file \(path): \(error.reason)")
            }
        }
        if mail.username != nil && secrets.mailPassword == nil {
            throw Failure(
                description:
                    "mail.username is set but there is no password (BROKER_MAIL_PASSWORD or mail.password_file)")
        }
        return secrets
    }

    /// The broker's service on `store`: the audit trail the configuration names, the signing key file if one is
    /// set, the master key (from the environment, its file or the store), then ``BrokerService/open``.
    package static func service(
        configuration: ServerConfiguration,
        providers: [ProviderDescriptor],
        store: any Store,
        secrets: Secrets,
        environment: [String: String],
        logger: Logger,
        clock: any WallClock = SystemClock()
    ) async throws -> BrokerService {
        let audit: AuditTrail
        do {
            audit = try AuditTrail(
                destination: AuditTrail.destination(configuration.auditLog), clock: clock,
                store: configuration.auditStore ? store : nil)
        } catch {
            throw Failure(description: "cannot open the audit log: \(error)")
        }
        let signingKey = try configuration.signingKeyFile.map {
            try SigningKeyFile.load(path: PosixFile.expandingTilde($0))
        }
        let master = try await MasterKey.load(configuration: configuration, environment: environment, store: store)
        return try await BrokerService.open(
            configuration: configuration, providers: providers, store: store, signingKey: signingKey, master: master,
            logger: logger, clock: clock, audit: audit, mailPassword: secrets.mailPassword)
    }

    /// Builds the provider modules once and reads the providers' icons, before any store or data directory is
    /// opened: a key file that cannot be read, a key of the wrong kind, an icon that is not an image is a
    /// configuration error of `source` (the file), and nothing has been made yet. No module calls out while it
    /// is built; the transport here refuses every call.
    package static func checkProviders(
        _ configuration: ServerConfiguration, providers: [ProviderDescriptor], source: String,
        clock: any WallClock = SystemClock()
    ) throws(ConfigurationError) {
        func rephrased(_ error: ConfigurationError) -> ConfigurationError {
            ConfigurationError(
                source: source, key: nil,
                problem: error.problem.hasPrefix("providers.") ? error.problem : "\(error.source): \(error.problem)")
        }
        let refusing: @Sendable () -> any HTTPTransport = { RefusingTransport() }
        let logger = Logger(label: "broker.check")
        do {
            _ = try SignInService.makeProviders(
                configuration, from: providers,
                context: ProviderContext(
                    http: refusing, clock: clock,
                    directory: IssuerDirectory(http: refusing, clock: clock, logger: logger),
                    readSecretFile: BrokerService.readSecretFile))
            _ = try ProviderIcon.load(configuration)
        } catch let error as ConfigurationError {
            throw rephrased(error)
        } catch {
            throw ConfigurationError(source: source, key: nil, problem: "\(error)")
        }
    }

    /// Where `GET /metrics` is served, and the token it asks for.
    package static func metricsEndpoint(_ configuration: ServerConfiguration, secrets: Secrets) -> MetricsEndpoint {
        MetricsEndpoint(port: configuration.metricsPort, host: configuration.metricsHost, token: secrets.metricsToken)
    }

    /// The connection limits the configuration sets.
    package static func limits(_ configuration: ServerConfiguration) -> ConnectionLimits {
        ConnectionLimits(
            maxConnections: configuration.maxConnections, requestTimeout: configuration.requestTimeout,
            perAddress: configuration.connectionsPerAddress, trustedProxies: configuration.trustedProxies)
    }
}

/// The transport of ``BrokerStartup/checkProviders(_:providers:source:clock:)``: building a module calls nowhere.
private struct RefusingTransport: HTTPTransport {
    func send(_ request: HTTPClientRequest) async throws -> HTTPClientResponse {
        throw HTTPClientError(kind: .connectionFailed, message: "no outbound call while the configuration is checked")
    }
}
