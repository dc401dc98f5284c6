import ArgumentParser
import BrokerConfiguration
import BrokerCore
import BrokerProviders
import BrokerServer
import BrokerStore
import BrokerSystem
import Logging

#if PostgreSQL
    import BrokerPostgres
#endif

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
            catalog: BrokerProviders.all,
            path: config,
            environment: ProcessInfo.processInfo.environment
        )
        if let dataDirectory { configuration.dataDirectory = dataDirectory }
        if let database { configuration.database = database }
        if let masterKeyFile { configuration.masterKeyFile = masterKeyFile }
        return configuration
    }
}

/// Opens the store the configuration names: the data directory's SQLite file, `sqlite:PATH`, or PostgreSQL
/// (password from `BROKER_DATABASE_PASSWORD`, else `server.database_password_file`, else the URL's, which is
/// warned about). Pending migrations are applied.
enum StoreOpener {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func open(_ configuration: ServerConfiguration, logger: Logger) async throws -> any Store {
        guard let database = configuration.database else {
            let directory = configuration.expandedDataDirectory
            try PosixFile.ensurePrivateDirectory(directory)
            return try SQLiteStore(path: directory + "/broker.sqlite3")
        }
        switch try DatabaseLocation.parse(database) {
        case .sqlite(let path):
            return try SQLiteStore(path: PosixFile.expandingTilde(path))
        case .postgres(let location):
            #if PostgreSQL
                return try await openPostgres(location, configuration, logger: logger)
            #else
                _ = location
                throw Failure(
                    description:
                        "this broker was built without PostgreSQL (the quick start's build, swift build "
                        + "--disable-default-traits); scripts/install.sh and swift build have it")
            #endif
        }
    }

    #if PostgreSQL
        static func openPostgres(
            _ location: PostgresLocation, _ configuration: ServerConfiguration, logger: Logger
        ) async throws
            -> any Store
        {
            let environment = ProcessInfo.processInfo.environment
            var password = environment["BROKER_DATABASE_PASSWORD"]
            if password == nil, let file = configuration.databasePasswordFile {
                let path = PosixFile.expandingTilde(file)
                do {
                    password = try PosixFile.readSecret(path: path)
                } catch {
                    throw Failure(description: "cannot read the database password file \(path): \(error.reason)")
                }
            }
            if location.passwordInURL != nil {
                Console.error(
                    "warning: the database URL carries a password (it shows in shell history and process lists); "
                        + "use BROKER_DATABASE_PASSWORD or server.database_password_file")
            }
            return try await PostgresStore.open(
                location, password: password, poolSize: configuration.databasePoolSize,
                deadline: .seconds(configuration.databaseTimeout), logger: logger)
        }
    #endif

    /// A logger for the store's own messages from commands other than `serve` (errors only, to stderr).
    static var quietLogger: Logger {
        var logger = Logger(label: "broker") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = .error
        return logger
    }
}
