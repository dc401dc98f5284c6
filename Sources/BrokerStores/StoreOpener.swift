package import BrokerConfiguration
import BrokerCore
package import BrokerStore
import BrokerSystem
package import Logging

#if PostgreSQL
    import BrokerPostgres
#endif

/// Opens the store a configuration names — the data directory's SQLite file, `sqlite:PATH`, or PostgreSQL —
/// where both stores are visible (BrokerStore cannot see BrokerPostgres, which builds on it and sits behind the
/// `PostgreSQL` trait). Pending migrations are applied. `serve`, `db`, `keys` and `client` all open through it.
package enum StoreOpener {
    package struct Failure: Error, CustomStringConvertible {
        package let description: String

        package init(description: String) {
            self.description = description
        }
    }

    /// - Parameters:
    ///   - environment: where `BROKER_DATABASE_PASSWORD` is read (the process's, in the commands).
    ///   - warn: told about a password written into the database URL (it shows in shell history and process
    ///     lists).
    package static func open(
        _ configuration: ServerConfiguration, environment: [String: String], logger: Logger,
        warn: (String) -> Void = { _ in }
    ) async throws -> any Store {
        guard let database = configuration.database else {
            let directory = configuration.expandedDataDirectory
            try PosixFile.ensurePrivateDirectory(directory)
            return try SQLiteStore(path: directory + "/broker.sqlite3")
        }
        switch try DatabaseLocation.parse(database) {
        case .sqlite(let path):
            return try SQLiteStore(path: PosixFile.expandingTilde(path))
        case .postgres(let location):
            // PostgreSQL: the password from BROKER_DATABASE_PASSWORD, else server.database_password_file, else
            // the URL's (warned about).
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
                warn(
                    "warning: the database URL carries a password (it shows in shell history and process lists); "
                        + "use BROKER_DATABASE_PASSWORD or server.database_password_file")
            }
            #if PostgreSQL
                return try await PostgresStore.open(
                    location, password: password, poolSize: configuration.databasePoolSize,
                    deadline: .seconds(configuration.databaseTimeout), logger: logger)
            #else
                _ = password
                throw Failure(
                    description:
                        "this broker was built without PostgreSQL (the quick start's build, swift build "
                        + "--disable-default-traits); scripts/install.sh and swift build have it")
            #endif
        }
    }

    /// A logger for the store's own messages from commands other than `serve` (errors only, to stderr).
    package static var quietLogger: Logger {
        var logger = Logger(label: "broker") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = .error
        return logger
    }
}
