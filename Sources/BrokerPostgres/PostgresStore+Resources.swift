import BrokerCore
package import BrokerStore
import PostgresNIO

/// Resources, on PostgreSQL: one facet of the store, in the same order in both dialects.
extension PostgresStore {
    package func createResource(_ resource: ResourceRecord) async throws {
        do {
            try await query(
                "resource creation",
                """
                INSERT INTO resources (url, scopes, created_at, bearer)
                VALUES (\(resource.url), \(AppRecord.encode(resource.scopes)), \(resource.createdAt),
                    \(Int64(resource.bearer ? 1 : 0)))
                """)
        } catch let error as StoreError where error.code == .conflict {
            throw StoreError.conflict("a resource with this URL exists")
        }
    }

    package func resource(url: String) async throws -> ResourceRecord? {
        try await resources("SELECT url, scopes, created_at, bearer FROM resources WHERE url = \(url)").first
    }

    package func resources() async throws -> [ResourceRecord] {
        try await resources("SELECT url, scopes, created_at, bearer FROM resources ORDER BY url")
    }

    private func resources(_ query: PostgresQuery) async throws -> [ResourceRecord] {
        let client = client
        return try await run("resource read") {
            var found: [ResourceRecord] = []
            let rows = try await client.query(query).decode((String, String, Int64, Int64).self)
            for try await (url, scopes, createdAt, bearer) in rows {
                found.append(
                    ResourceRecord(
                        url: url, scopes: AppRecord.decode(scopes), createdAt: createdAt, bearer: bearer != 0))
            }
            return found
        }
    }

    package func deleteResource(url: String) async throws -> Bool {
        try await returnsRow("resource removal", "DELETE FROM resources WHERE url = \(url) RETURNING 1")
    }

    package func createRegistrationToken(hash: [UInt8], _ token: RegistrationTokenRecord) async throws {
        try await query(
            "registration token creation",
            """
            INSERT INTO registration_tokens (hash, created_at, expires_at)
            VALUES (\(hash.hex), \(token.createdAt), \(token.expiresAt))
            """)
    }

    package func spendRegistrationToken(hash: [UInt8], now: Int64) async throws -> Bool {
        try await returnsRow(
            "registration token use",
            """
            UPDATE registration_tokens SET used_at = \(now)
            WHERE hash = \(hash.hex) AND used_at IS NULL AND expires_at > \(now) RETURNING 1
            """)
    }
}
