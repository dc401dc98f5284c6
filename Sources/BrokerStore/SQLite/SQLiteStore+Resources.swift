import BrokerCore
import GRDB

/// Resources, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {
    package func createResource(_ resource: ResourceRecord) async throws {
        do {
            try await write { db in
                try db.execute(
                    sql: "INSERT INTO resources (url, scopes, created_at, bearer) VALUES (?, ?, ?, ?)",
                    arguments: [
                        resource.url, AppRecord.encode(resource.scopes), resource.createdAt, resource.bearer ? 1 : 0,
                    ])
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.conflict("a resource with this URL exists")
        }
    }

    package func resource(url: String) async throws -> ResourceRecord? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM resources WHERE url = ?", arguments: [url]).map(Self.resource)
        }
    }

    package func resources() async throws -> [ResourceRecord] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM resources ORDER BY url").map(Self.resource)
        }
    }

    package func deleteResource(url: String) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM resources WHERE url = ?", arguments: [url])
            return db.changesCount == 1
        }
    }

    package func createRegistrationToken(hash: [UInt8], _ token: RegistrationTokenRecord) async throws {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO registration_tokens (hash, created_at, expires_at) VALUES (?, ?, ?)",
                arguments: [hash.hex, token.createdAt, token.expiresAt])
        }
    }

    package func spendRegistrationToken(hash: [UInt8], now: Int64) async throws -> Bool {
        try await write { db in
            try db.execute(
                sql: """
                    UPDATE registration_tokens SET used_at = ?
                    WHERE hash = ? AND used_at IS NULL AND expires_at > ?
                    """,
                arguments: [now, hash.hex, now])
            return db.changesCount == 1
        }
    }

    static func resource(_ row: Row) -> ResourceRecord {
        ResourceRecord(
            url: row["url"], scopes: AppRecord.decode(row["scopes"]), createdAt: row["created_at"],
            bearer: (row["bearer"] as Int64? ?? 0) != 0)
    }
}
