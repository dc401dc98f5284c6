import BrokerCore
import BrokerSystem
import GRDB

/// CI clients, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {
    package func createClient(_ client: ClientRecord) async throws {
        do {
            try await write { db in
                try db.execute(
                    sql: """
                        INSERT INTO clients (name, secret_hash, scopes, trust_issuer, trust_subject, trust_audience,
                                             trust_max_age, created_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        // "" stands for "no secret" (the column predates secretless clients; a keyed hash is
                        // never empty).
                        client.name, client.secretHash ?? "", client.scopes.joined(separator: " "),
                        client.trust?.issuer,
                        client.trust?.subjectPattern, client.trust?.audience, client.trust?.maxAge, client.createdAt,
                    ]
                )
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.conflict("a client named \(client.name) exists")
        }
    }

    static let clientColumns =
        "name, secret_hash, scopes, trust_issuer, trust_subject, trust_audience, trust_max_age, created_at"

    /// Answered by ``SessionLookup`` on the caller's thread: read on every CI mint.
    package nonisolated(nonsending) func client(name: String) async throws -> ClientRecord? {
        try observation.timedNow(#function) { try lookup.client(name: name) }
    }

    package func clients() async throws -> [ClientRecord] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT \(Self.clientColumns) FROM clients ORDER BY name").map(Self.client)
        }
    }

    package func deleteClient(name: String) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM clients WHERE name = ?", arguments: [name])
            return db.changesCount == 1
        }
    }

    package func recordExchange(issuer: String, jti: String, expiresAt: Int64) async throws -> Bool {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO exchanged_tokens (issuer, jti, expires_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                arguments: [issuer, jti, expiresAt]
            )
            return db.changesCount == 1
        }
    }
}
