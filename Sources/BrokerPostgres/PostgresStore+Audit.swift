package import BrokerCore
package import BrokerStore
import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// Audit events, on PostgreSQL: one facet of the store, in the same order in both dialects.
extension PostgresStore {
    package func appendAuditEvent(_ event: AuditEventRecord) async throws {
        try await query(
            "audit event",
            """
            INSERT INTO audit_events (time, event, user_id, document)
            VALUES (\(event.time), \(event.event), \(event.userID), \(event.document))
            """)
    }

    package func auditEvents(user: UserID?, since: Int64?, limit: Int) async throws -> [AuditEventRecord] {
        let client = client
        let owner = user?.description
        return try await run("audit list") {
            var events: [AuditEventRecord] = []
            let rows = try await client.query(
                """
                SELECT time, event, user_id, document FROM (
                    SELECT id, time, event, user_id, document FROM audit_events
                    WHERE (\(owner)::text IS NULL OR user_id = \(owner)) AND (\(since)::bigint IS NULL OR time >= \(since))
                    ORDER BY id DESC LIMIT \(limit)
                ) AS newest ORDER BY id
                """
            ).decode((Int64, String, String?, String).self)
            for try await (time, event, userID, document) in rows {
                events.append(AuditEventRecord(time: time, event: event, userID: userID, document: document))
            }
            return events
        }
    }

    @discardableResult package func purgeAuditEvents(before: Int64) async throws -> Int {
        let client = client
        return try await run("audit purge") {
            let rows = try await client.query(
                "WITH gone AS (DELETE FROM audit_events WHERE time < \(before) RETURNING 1) SELECT count(*) FROM gone"
            ).decode(Int64.self)
            for try await count in rows { return Int(count) }
            return 0
        }
    }
}
