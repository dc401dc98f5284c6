import BrokerCore
package import BrokerStore
import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// CI clients, on PostgreSQL: one facet of the store, in the same order in both dialects.
extension PostgresStore {
    package func createClient(_ record: ClientRecord) async throws {
        do {
            try await query(
                "client creation",
                """
                INSERT INTO clients (name, secret_hash, scopes, trust_issuer, trust_subject, trust_audience,
                                     trust_max_age, created_at)
                VALUES (\(record.name), \(record.secretHash ?? ""), \(record.scopes.joined(separator: " ")),
                        \(record.trust?.issuer), \(record.trust?.subjectPattern), \(record.trust?.audience),
                        \(record.trust?.maxAge), \(record.createdAt))
                """)
        } catch let error as StoreError where error.code == .conflict {
            throw StoreError.conflict("a client named \(record.name) exists")
        }
    }

    package nonisolated(nonsending) func client(name: String) async throws -> ClientRecord? {
        try await observation.timed(#function) { try await batchedClient(name: name) }
    }

    private func batchedClient(name: String) async throws -> ClientRecord? {
        try await clientReads.read(name) { [self] names in
            let client = client
            return try await run("client lookup", function: nil) { () -> [String: ClientRecord] in
                var records: [String: ClientRecord] = [:]
                for try await row in try await client.execute(ClientsByName(names: names)) {
                    let record = Self.client(row)
                    records[record.name] = record
                }
                return records
            }
        }
    }

    package func clients() async throws -> [ClientRecord] {
        let client = client
        return try await run("client list") {
            var records: [ClientRecord] = []
            let rows = try await client.query(
                """
                SELECT name, secret_hash, scopes, trust_issuer, trust_subject, trust_audience, trust_max_age,
                       created_at
                FROM clients ORDER BY name
                """
            ).decode(ClientsByName.Row.self)
            for try await row in rows { records.append(Self.client(row)) }
            return records
        }
    }

    package func deleteClient(name: String) async throws -> Bool {
        try await returnsRow("client deletion", "DELETE FROM clients WHERE name = \(name) RETURNING 1")
    }

    package func recordExchange(issuer: String, jti: String, expiresAt: Int64) async throws -> Bool {
        try await returnsRow(
            "token exchange",
            """
            INSERT INTO exchanged_tokens (issuer, jti, expires_at) VALUES (\(issuer), \(jti), \(expiresAt))
            ON CONFLICT DO NOTHING RETURNING 1
            """)
    }

    static func client(_ row: ClientsByName.Row) -> ClientRecord {
        let (name, hash, scopes, issuer, subject, audience, maxAge, created) = row
        var trust: TrustPolicy?
        if let issuer, let subject {
            trust = TrustPolicy(
                issuer: issuer, subjectPattern: subject, audience: audience ?? "broker", maxAge: maxAge ?? 600)
        }
        return ClientRecord(
            name: name, secretHash: hash.isEmpty ? nil : hash, scopes: scopes.split(separator: " ").map(String.init),
            trust: trust, createdAt: created)
    }
}
