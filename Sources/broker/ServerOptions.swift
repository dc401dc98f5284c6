import ArgumentParser
import BrokerProviders
import BrokerServer
import BrokerStore
import BrokerSystem

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

    /// The configuration file, then `BROKER_SERVER_…`/`BROKER_PROVIDERS_…`, then these flags.
    func loadConfiguration() throws(ConfigurationError) -> ServerConfiguration {
        var configuration = try ServerConfiguration.load(
            catalog: BrokerProviders.all,
            path: config,
            environment: ProcessInfo.processInfo.environment
        )
        if let dataDirectory { configuration.dataDirectory = dataDirectory }
        if let database { configuration.database = database }
        return configuration
    }
}

/// Opens the store the configuration names.
enum StoreOpener {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func open(_ configuration: ServerConfiguration) throws -> any Store {
        if let database = configuration.database {
            let lower = database.lowercased()
            if lower.hasPrefix("sqlite:") {
                var path = String(database.dropFirst("sqlite:".count))
                if path.hasPrefix("//") { path = String(path.dropFirst(2)) }
                return try SQLiteStore(path: PosixFile.expandingTilde(path))
            }
            throw Failure(
                description: "the PostgreSQL store is not part of this build yet; "
                    + "use the default SQLite store (omit --database) or sqlite:PATH"
            )
        }
        let directory = configuration.expandedDataDirectory
        try PosixFile.ensurePrivateDirectory(directory)
        return try SQLiteStore(path: directory + "/broker.sqlite3")
    }
}
