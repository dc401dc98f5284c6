import BrokerCore
import BrokerSystem
import GRDB

/// The embedded default store: one SQLite file in the data directory, through GRDB.
///
/// WAL mode (a `DatabasePool`) lets `/auth/me` and the JWKS read while a login writes; a busy timeout
/// lets `broker client add` write from another process while the server runs.
package final class SQLiteStore: Store {
    let pool: DatabasePool
    let lookup: SessionLookup
    /// DPoP proofs' and flows' state markers, spent in shared transactions (``StateMarkerWrites``).
    let markerWrites: StateMarkerWrites
    package let path: String
    /// Where each call's time goes (``observe(_:)``).
    let observation = StoreObservation()

    /// Opens (creating, mode 0600) the database at `path` and migrates it to the current schema.
    package init(path: String) throws {
        self.path = path
        lookup = SessionLookup(path: path)
        do {
            try PosixFile.createIfMissing(path, mode: 0o600)
        } catch {
            throw StoreError.unavailable("cannot create the database \(error)")
        }
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.foreignKeysEnabled = true
        configuration.label = "broker"
        do {
            let pool = try DatabasePool(path: path, configuration: configuration)
            self.pool = pool
            // Timed per caller by ``spendStateMarker(_:expiresAt:)``, not per batch.
            markerWrites = StateMarkerWrites { markers in
                try await pool.write { db in
                    try markers.map { marker, expiresAt in
                        try db.execute(
                            sql: "INSERT INTO state_markers (marker, expires_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                            arguments: [marker, expiresAt])
                        return db.changesCount == 1
                    }
                }
            }
            try Self.migrate(pool)
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError.unavailable("cannot open the database \(path): \(error)")
        }
    }

    /// ``Schema/migrations`` in SQLite's dialect, recorded in `grdb_migrations` by identifier.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for migration in Schema.migrations {
            migrator.registerMigration(migration.identifier) { db in try db.execute(sql: migration.sqlite) }
        }
        return migrator
    }

    /// Applies pending migrations; refuses a database a newer broker migrated. Returns the versions applied.
    @discardableResult
    static func migrate(_ pool: DatabasePool) throws -> [Int] {
        let migrator = migrator
        let known = Set(Schema.migrations.map(\.identifier))
        let applied = try pool.read { db in try migrator.appliedIdentifiers(db) }
        let unknown = applied.subtracting(known)
        if !unknown.isEmpty {
            throw Schema.newerThanBinary(unknown.compactMap { Int($0.dropFirst().prefix { $0.isNumber }) })
        }
        try migrator.migrate(pool)
        return Schema.migrations.filter { !applied.contains($0.identifier) }.map(\.version)
    }

    package func observe(_ observer: any StoreObserver) { observation.set(observer) }

    /// The choke point of every read: the pool's, timed under the calling store method's name.
    func read<T: Sendable>(_ function: StaticString = #function, _ body: @Sendable (Database) throws -> T)
        async throws -> T
    {
        try await observation.timed(function) { try await pool.read(body) }
    }

    /// The choke point of every write (one transaction), timed under the calling store method's name.
    func write<T: Sendable>(_ function: StaticString = #function, _ body: @Sendable (Database) throws -> T)
        async throws -> T
    {
        try await observation.timed(function) { try await pool.write(body) }
    }

    package func ping() async throws {
        _ = try await read { db in try Int.fetchOne(db, sql: "SELECT 1") }
    }

    package func schemaVersion() async throws -> Int {
        let applied = try await read { db in try Self.migrator.appliedIdentifiers(db) }
        return Schema.migrations.filter { applied.contains($0.identifier) }.map(\.version).max() ?? 0
    }

    static func insert(_ identity: IdentityRecord, user: UserID, now: Int64, _ db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO identities (provider, subject, user_id, email, name, linked_at) VALUES (?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                identity.provider.rawValue, identity.subject, user.description, identity.email, identity.name, now,
            ])
    }

}

extension SQLiteStore {
    package func exportRows(_ table: Schema.Table) async throws -> [[StoreValue]] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT \(table.columnList) FROM \(table.name)").map { row in
                table.columns.enumerated().map { index, column -> StoreValue in
                    switch column.kind {
                    case .integer: (row[index] as Int64?).map(StoreValue.integer) ?? .null
                    case .text: (row[index] as String?).map(StoreValue.text) ?? .null
                    }
                }
            }
        }
    }

    package func importRows(_ tables: [(Schema.Table, [[StoreValue]])]) async throws {
        try await write { db in
            for (table, rows) in tables {
                let marks = Array(repeating: "?", count: table.columns.count).joined(separator: ", ")
                let statement = try db.makeStatement(
                    sql: "INSERT INTO \(table.name) (\(table.columnList)) VALUES (\(marks))")
                for row in rows {
                    let values: [(any DatabaseValueConvertible)?] = row.map { value in
                        switch value {
                        case .null: nil
                        case .integer(let number): number
                        case .text(let text): text
                        }
                    }
                    try statement.execute(arguments: StatementArguments(values))
                }
            }
        }
    }

    package func count(_ table: Schema.Table) async throws -> Int {
        try await read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM \(table.name)") ?? 0 }
    }
}
