import BrokerConfiguration
import BrokerStore
import BrokerStores
import BrokerTesting
import Foundation
import Logging
import Synchronization
import Testing

/// Opening the store a configuration names (BrokerStores, issue 30): the data directory's SQLite file (the
/// folder made 0700), `sqlite:PATH`, PostgreSQL with its password from the environment or a file, and what a
/// bad location says. The PostgreSQL cases run through `scripts/with-postgres.sh` (they say so otherwise).
@Suite("opening the configured store")
struct StoreOpenerTests {
    final class Warnings: Sendable {
        let seen = Mutex<[String]>([])
        func add(_ text: String) { seen.withLock { $0.append(text) } }
        var all: [String] { seen.withLock { $0 } }
    }

    @Test func withoutADatabaseItIsTheDataDirectorysSQLiteFileInAPrivateFolder() async throws {
        let root = try TemporaryDirectory.make(prefix: "broker-open").path
        var configuration = ServerConfiguration()
        configuration.dataDirectory = root + "/data/broker"
        let store = try await StoreOpener.open(configuration, environment: [:], logger: Logger.test())
        #expect(try await store.schemaVersion() == Schema.current, "migrated on opening")
        #expect(FileManager.default.fileExists(atPath: root + "/data/broker/broker.sqlite3"))
        let mode = try FileManager.default.attributesOfItem(atPath: root + "/data/broker")[.posixPermissions] as? Int
        #expect(mode == 0o700)
    }

    @Test func sqlitePathOpensThatFile() async throws {
        let root = try TemporaryDirectory.make(prefix: "broker-open").path
        var configuration = ServerConfiguration()
        configuration.dataDirectory = root + "/unused"
        configuration.database = "sqlite:" + root + "/elsewhere.sqlite3"
        let store = try await StoreOpener.open(configuration, environment: [:], logger: Logger.test())
        #expect(try await store.schemaVersion() == Schema.current)
        #expect(FileManager.default.fileExists(atPath: root + "/elsewhere.sqlite3"))
        #expect(!FileManager.default.fileExists(atPath: root + "/unused"), "the data directory is not made")
    }

    @Test func aLocationThatIsNeitherIsRefusedWithWhatIsAccepted() async throws {
        var configuration = ServerConfiguration()
        configuration.database = "mysql://db.example/broker"
        let error = await #expect(throws: (any Error).self) {
            _ = try await StoreOpener.open(configuration, environment: [:], logger: Logger.test())
        }
        #expect("\(error.map { "\($0)" } ?? "")".contains("postgres://"), "\(String(describing: error))")
    }

    @Test func postgresTakesThePasswordFromTheEnvironmentAndWarnsAboutOneInTheURL() async throws {
        let url = try await TestPostgres.freshDatabase()
        var configuration = ServerConfiguration()
        configuration.database = url
        let warnings = Warnings()
        let store = try await StoreOpener.open(
            configuration, environment: ["BROKER_DATABASE_PASSWORD": TestPostgres.password], logger: Logger.test(),
            warn: warnings.add)
        #expect(try await store.schemaVersion() == Schema.current)
        #expect(warnings.all.isEmpty)

        // A password in the URL is warned about (never echoed); the environment's still wins.
        configuration.database = url.replacingOccurrences(of: "://postgres@", with: "://postgres:in-the-url@")
        #expect(configuration.database != url)
        _ = try await StoreOpener.open(
            configuration, environment: ["BROKER_DATABASE_PASSWORD": TestPostgres.password], logger: Logger.test(),
            warn: warnings.add)
        #expect(warnings.all.count == 1 && warnings.all[0].contains("carries a password"))
        #expect(!warnings.all[0].contains("in-the-url"))
    }

    @Test func postgresReadsThePasswordFileAndNamesOneThatCannotBeRead() async throws {
        let url = try await TestPostgres.freshDatabase()
        let root = try TemporaryDirectory.make(prefix: "broker-open").path
        let file = root + "/db-password"
        try Data((TestPostgres.password + "\n").utf8).write(to: URL(fileURLWithPath: file))
        var configuration = ServerConfiguration()
        configuration.database = url
        configuration.databasePasswordFile = file
        let store = try await StoreOpener.open(configuration, environment: [:], logger: Logger.test())
        #expect(try await store.schemaVersion() == Schema.current)

        configuration.databasePasswordFile = root + "/missing"
        let failure = await #expect(throws: StoreOpener.Failure.self) {
            _ = try await StoreOpener.open(configuration, environment: [:], logger: Logger.test())
        }
        #expect(failure?.description.contains(root + "/missing") == true, "\(String(describing: failure))")
    }
}
