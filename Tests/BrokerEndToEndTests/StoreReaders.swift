import BrokerCore
import BrokerCrypto
import BrokerPostgres
import BrokerStore
import BrokerTesting
import GRDB
import Logging

/// Reads a running broker's PostgreSQL store the way `broker db copy` does — the store's `CopyableStore`
/// facet, over its own connection — instead of through `psql` (issue 30: no test reads the schema with psql
/// or Python).
enum PostgresReader {
    /// Runs `body` with a store on `url` (one connection, no migration) and closes it.
    static func with<T: Sendable>(
        _ url: String, _ body: @Sendable (PostgresStore) async throws -> T
    ) async throws -> T {
        guard case .postgres(let location) = try DatabaseLocation.parse(url) else {
            throw TestSupportError("not a postgres:// URL: \(url)")
        }
        let store = try await PostgresStore.open(
            location, password: TestPostgres.password, poolSize: 1, deadline: .seconds(30), migrate: false,
            logger: Logger(label: "test-reader") { _ in SwiftLogNoOpLogHandler() })
        do {
            let result = try await body(store)
            await store.close()
            return result
        } catch {
            await store.close()
            throw error
        }
    }

    /// How many rows `table` holds.
    static func count(_ url: String, _ table: String) async throws -> Int {
        try await with(url) { try await $0.count(try StoreTables.named(table)) }
    }
}

enum StoreTables {
    static func named(_ name: String) throws -> Schema.Table {
        guard let table = Schema.tables.first(where: { $0.name == name }) else {
            throw TestSupportError("no table \(name) in Schema.tables")
        }
        return table
    }

    static func rows(_ store: any CopyableStore, _ name: String) async throws -> [[String: StoreValue]] {
        let table = try named(name)
        return try await store.exportRows(table).map { values in
            Dictionary(uniqueKeysWithValues: zip(table.columns.map(\.name), values))
        }
    }
}

/// Reads a broker's SQLite file beside the running broker through SQLite itself (GRDB, read-only, waiting
/// out the broker's writes), not through the broker's store code: what the crash-consistency test checks
/// after each kill.
struct SQLiteInspection: Sendable {
    /// `PRAGMA integrity_check`'s answer ("ok").
    var integrity: String
    var foreignKeyErrors: Int
    /// Sessions with more than one live refresh token.
    var doubleLive: Int
    /// Each refresh token's state: live, used, revoked (its session), or unknown.
    var tokens: [String: String]
    var missingEmails: [String]

    static func read(_ path: String, tokens: [String], emails: [String]) async throws -> SQLiteInspection {
        var configuration = Configuration()
        configuration.readonly = true
        configuration.busyMode = .timeout(30)
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        return try await queue.read { db in
            let integrity = try String.fetchOne(db, sql: "PRAGMA integrity_check") ?? "?"
            let foreignKeyErrors = try Row.fetchAll(db, sql: "PRAGMA foreign_key_check").count
            let doubleLive =
                try Int.fetchOne(
                    db,
                    sql: """
                        SELECT count(*) FROM (SELECT session_id FROM refresh_tokens WHERE used_at IS NULL
                        GROUP BY session_id HAVING count(*) > 1)
                        """) ?? -1
            var states: [String: String] = [:]
            for token in tokens {
                let digest = Digest.sha256(token).hex
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT t.used_at AS used, s.revoked_at AS revoked FROM refresh_tokens t
                        JOIN sessions s ON s.id = t.session_id WHERE t.hash = ?
                        """, arguments: [digest])
                guard let row else {
                    states[token] = "unknown"
                    continue
                }
                let used: Int64? = row["used"]
                let revoked: Int64? = row["revoked"]
                states[token] = revoked != nil ? "revoked" : used == nil ? "live" : "used"
            }
            var missing: [String] = []
            for email in emails
            where try Int.fetchOne(
                db, sql: "SELECT count(*) FROM password_accounts WHERE email = ?", arguments: [email])
                == 0
            {
                missing.append(email)
            }
            return SQLiteInspection(
                integrity: integrity, foreignKeyErrors: foreignKeyErrors, doubleLive: doubleLive, tokens: states,
                missingEmails: missing)
        }
    }
}
