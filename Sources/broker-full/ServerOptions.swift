import ArgumentParser
import BrokerConfiguration
import BrokerCore
import BrokerProviderSchemas
import BrokerServer
import BrokerStore
import BrokerStores
import BrokerSystem
import Logging

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The options that locate a broker's configuration and store: shared by `serve`, `keys` and `client`.
struct ServerStoreOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The broker's JSON configuration file.", valueName: "FILE"))
    var config: String?

    @Option(
        name: .customLong("data-dir"),
        help: ArgumentHelp("Where the SQLite store and generated keys live.", valueName: "DIR"))
    var dataDirectory: String?

    @Option(
        name: .long,
        help: ArgumentHelp("postgres://… or sqlite:PATH instead of the data dir's SQLite file.", valueName: "URL"))
    var database: String?

    @Option(
        name: .customLong("master-key-file"),
        help: ArgumentHelp(
            "The master key sealing the store's keys (default: server.master_key_file, BROKER_MASTER_KEY).",
            valueName: "FILE"))
    var masterKeyFile: String?

    /// The configuration file, then `BROKER_SERVER_…`/`BROKER_PROVIDERS_…`, then these flags.
    func loadConfiguration() throws(ConfigurationError) -> ServerConfiguration {
        var configuration = try ServerConfiguration.load(
            catalog: BrokerProviderSchemas.all,
            path: config,
            environment: ProcessInfo.processInfo.environment
        )
        if let dataDirectory { configuration.dataDirectory = dataDirectory }
        if let database { configuration.database = database }
        if let masterKeyFile { configuration.masterKeyFile = masterKeyFile }
        return configuration
    }
}

extension StoreOpener {
    /// ``open(_:environment:logger:warn:)`` with the process's environment, warnings on stderr.
    static func open(_ configuration: ServerConfiguration, logger: Logger) async throws -> any Store {
        try await open(
            configuration, environment: ProcessInfo.processInfo.environment, logger: logger,
            warn: { Console.error($0) })
    }
}
