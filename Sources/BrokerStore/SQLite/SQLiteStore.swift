package import BrokerCore
import BrokerSystem
import GRDB

/// The embedded default store: one SQLite file in the data directory, through GRDB.
///
/// WAL mode (a `DatabasePool`) lets `/auth/me` and the JWKS read while a login writes; a busy timeout
/// lets `broker client add` write from another process while the server runs.
package final class SQLiteStore: Store {
    let pool: DatabasePool
    let lookup: SessionLookup
    package let path: String

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
            pool = try DatabasePool(path: path, configuration: configuration)
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

    package func ping() async throws {
        _ = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") }
    }

    package func schemaVersion() async throws -> Int {
        let applied = try await pool.read { db in try Self.migrator.appliedIdentifiers(db) }
        return Schema.migrations.filter { applied.contains($0.identifier) }.map(\.version).max() ?? 0
    }

    package func createPasswordAccount(user: UserRecord, email: String, passwordHash: String, verifiedAt: Int64?)
        async throws
    {
        do {
            try await pool.write { db in
                try Self.insert(user, db)
                try db.execute(
                    sql: """
                        INSERT INTO password_accounts (email, user_id, password_hash, updated_at, email_verified_at)
                        VALUES (?, ?, ?, ?, ?)
                        """,
                    arguments: [email, user.id.description, passwordHash, user.createdAt, verifiedAt]
                )
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.conflict("an account with this email exists")
        }
    }

    package func passwordAccount(email: String) async throws -> PasswordAccount? {
        try await passwordAccount(where: "a.email", is: email)
    }

    package func passwordAccount(user: UserID) async throws -> PasswordAccount? {
        try await passwordAccount(where: "a.user_id", is: user.description)
    }

    /// The password account whose `column` (one of ours, never input) is `value`.
    func passwordAccount(where column: StaticString, is value: String) async throws -> PasswordAccount? {
        try await pool.read { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT a.email, a.password_hash, a.email_verified_at, u.id, u.email AS user_email, u.name,
                        u.created_at
                        FROM password_accounts a JOIN users u ON u.id = a.user_id WHERE \(column) = ?
                        """,
                    arguments: [value]
                ),
                let user = Self.user(row)
            else { return nil }
            return PasswordAccount(
                user: user, email: row["email"], passwordHash: row["password_hash"],
                emailVerifiedAt: row["email_verified_at"])
        }
    }

    package func updatePasswordHash(email: String, from old: String, to new: String) async throws {
        try await pool.write { db in
            // Compare-and-set: a concurrent password change wins over a rehash.
            try db.execute(
                sql: "UPDATE password_accounts SET password_hash = ?, updated_at = strftime('%s','now') "
                    + "WHERE email = ? AND password_hash = ?",
                arguments: [new, email, old]
            )
        }
    }

    package func signIn(_ identity: IdentityRecord, now: Int64) async throws -> IdentitySignIn {
        try await pool.write { db in
            let selectUser = "SELECT id, email AS user_email, name, created_at FROM users WHERE id = ?"
            if let owner = try String.fetchOne(
                db, sql: "SELECT user_id FROM identities WHERE provider = ? AND subject = ?",
                arguments: [identity.provider.rawValue, identity.subject])
            {
                try db.execute(
                    sql: "UPDATE identities SET email = ?, name = ? WHERE provider = ? AND subject = ?",
                    arguments: [identity.email, identity.name, identity.provider.rawValue, identity.subject])
                // The user's own email and name follow the identity their id was made from.
                if owner == identity.derivedUserID.description {
                    try db.execute(
                        sql: "UPDATE users SET email = ?, name = ? WHERE id = ?",
                        arguments: [identity.email, identity.name, owner])
                }
                guard let user = try Row.fetchOne(db, sql: selectUser, arguments: [owner]).flatMap(Self.user) else {
                    throw StoreError.unavailable("the identity's user \(owner) is missing")
                }
                return .user(user)
            }
            let id = identity.derivedUserID
            if try Row.fetchOne(db, sql: selectUser, arguments: [id.description]) != nil { return .unlinked(from: id) }
            let user = UserRecord(id: id, email: identity.email, name: identity.name, createdAt: now)
            try Self.insert(user, db)
            try Self.insert(identity, user: id, now: now, db)
            return .user(user)
        }
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

extension [UInt8] {
    /// Lowercase hex, the form hashes are stored in.
    var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(count * 2)
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of lowercase or uppercase hex; `nil` for anything else.
    init?(hex: String) {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case 0x30...0x39: digit - 0x30
            case 0x61...0x66: digit - 0x61 + 10
            case 0x41...0x46: digit - 0x41 + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        self = bytes
    }
}

extension SQLiteStore {
    package func exportRows(_ table: Schema.Table) async throws -> [[StoreValue]] {
        try await pool.read { db in
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
        try await pool.write { db in
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
        try await pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM \(table.name)") ?? 0 }
    }
}
