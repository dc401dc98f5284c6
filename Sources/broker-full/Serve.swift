import ArgumentParser
import BrokerClient
import BrokerConfiguration
import BrokerCore
import BrokerProviders
import BrokerServer
import BrokerStores
import Logging
import NIOCore
import NIOPosix

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension Broker {
    struct Serve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run the identity broker.",
            discussion: """
                Prints one line, "broker listening on http://H:P", once it accepts connections.
                Settings: --config FILE, then BROKER_SERVER_<KEY> / BROKER_PROVIDERS_<ID>_<KEY> environment
                variables, then these flags. SIGTERM or SIGINT: finish requests in flight and exit 0.
                Logs go to stderr (BROKER_LOG_LEVEL or --log-level: trace, debug, info, warning, error).
                """
        )

        @OptionGroup var store: ServerStoreOptions

        @Option(name: .long, help: "Address to listen on (default 127.0.0.1).")
        var host: String?

        @Option(name: .long, help: "Port to listen on; 0 picks a free one (default 8787).")
        var port: Int?

        @Option(name: .long, help: ArgumentHelp("iss and discovery base (default http://H:P).", valueName: "URL"))
        var issuer: String?

        @Option(
            name: .customLong("signing-key"),
            help: ArgumentHelp("PEM private key to sign with (default: generated in the data dir).", valueName: "FILE"))
        var signingKey: String?

        @Option(name: .customLong("log-level"), help: "trace, debug, info, warning or error.")
        var logLevel: String?

        @Option(
            name: .customLong("log-format"),
            help: "text (default) or json: one JSON object per line (time, level, label, message, metadata).")
        var logFormat: String = "text"

        func validate() throws {
            if let port, !(0...65535).contains(port) { throw ValidationError("--port must be 0–65535") }
            if let logLevel, Logger.Level(rawValue: logLevel) == nil {
                throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
            }
            guard logFormat == "text" || logFormat == "json" else {
                throw ValidationError("--log-format must be text or json")
            }
        }

        func run() async throws {
            // Swift concurrency's jobs run on NIO's event loops (the ones Hummingbird serves on) instead of a
            // second pool of threads: an await resumes on the connection's own thread. Nothing of the broker blocks a
            // task's thread for long — hashing, libcurl, SMTP and the stores' writes have threads of their own (the
            // per-request reads of `SessionLookup` are a single indexed step). `BROKER_CONCURRENCY_EXECUTOR=
            // event-loops` runs them there as jobs of no isolation (EventLoopConcurrency), `dispatch` on Swift's own
            // pool (to compare, or to rule them out).
            let executorName = ProcessInfo.processInfo.environment["BROKER_CONCURRENCY_EXECUTOR"] ?? ""
            guard let executorChoice = EventLoopConcurrency.Choice(rawValue: executorName) else {
                throw CommandFailure(
                    "BROKER_CONCURRENCY_EXECUTOR=\(executorName.prefix(40)) is not a choice: leave it unset, "
                        + "or set event-loops or dispatch")
            }
            let executorDescription = await EventLoopConcurrency.apply(executorChoice)
            var configuration: ServerConfiguration
            do {
                configuration = try store.loadConfiguration()
                if let host { configuration.host = host }
                if let port { configuration.port = port }
                if let issuer { configuration.issuer = issuer }
                if let signingKey { configuration.signingKeyFile = signingKey }
                try configuration.validate(source: store.config ?? "command line")
                try BrokerStartup.checkProviders(
                    configuration, providers: BrokerProviders.all, source: store.config ?? "configuration")
            } catch {
                throw CommandFailure("config: \(error)")
            }
            let level =
                logLevel.flatMap(Logger.Level.init(rawValue:))
                ?? ProcessInfo.processInfo.environment["BROKER_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:))
                ?? .info
            let json = logFormat == "json"
            LoggingSystem.bootstrap { label in
                if json {
                    var handler = JSONLogHandler(label: label, clock: SystemClock())
                    handler.logLevel = level
                    return handler
                }
                var handler = VisibleLogHandler(StreamLogHandler.standardError(label: label))
                handler.logLevel = level
                return handler
            }
            let logger = Logger(label: "broker")
            logger.debug("Swift concurrency's jobs run on \(executorDescription)")

            let environment = ProcessInfo.processInfo.environment
            let service: BrokerService
            let secrets: BrokerStartup.Secrets
            do {
                secrets = try BrokerStartup.secrets(configuration, environment: environment)
                service = try await BrokerStartup.service(
                    configuration: configuration, providers: BrokerProviders.all,
                    store: try await StoreOpener.open(configuration, logger: logger), secrets: secrets,
                    environment: environment, logger: logger)
            } catch let error as ExitCode {
                throw error
            } catch {
                throw CommandFailure("cannot start: \(error)")
            }
            do {
                try await BrokerHTTPServer.run(
                    service: service, host: configuration.host, port: configuration.port,
                    limits: BrokerStartup.limits(configuration),
                    metrics: BrokerStartup.metricsEndpoint(configuration, secrets: secrets), logger: logger
                ) { host, port in
                    let shown = host.contains(":") ? "[\(host)]" : host
                    Console.out("broker listening on http://\(shown):\(port)")
                }
            } catch {
                throw CommandFailure("server stopped: \(error)")
            }
        }
    }
}
