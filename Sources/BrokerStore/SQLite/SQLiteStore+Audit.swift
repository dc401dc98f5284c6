package import BrokerCore
import BrokerSystem
import GRDB

/// Audit events, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {
    package func appendAuditEvent(_ event: AuditEventRecord) async throws {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO audit_events (time, event, user_id, document) VALUES (?, ?, ?, ?)",
                arguments: [event.time, event.event, event.userID, event.document])
        }
    }

    package func auditEvents(user: UserID?, since: Int64?, limit: Int) async throws -> [AuditEventRecord] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT time, event, user_id, document FROM (
                        SELECT id, time, event, user_id, document FROM audit_events
                        WHERE (? IS NULL OR user_id = ?) AND (? IS NULL OR time >= ?)
                        ORDER BY id DESC LIMIT ?
                    ) ORDER BY id
                    """,
                arguments: [user?.description, user?.description, since, since, limit]
            ).map { row in
                AuditEventRecord(
                    time: row["time"], event: row["event"], userID: row["user_id"], document: row["document"])
            }
        }
    }

    @discardableResult package func purgeAuditEvents(before: Int64) async throws -> Int {
        try await write { db in
            try db.execute(sql: "DELETE FROM audit_events WHERE time < ?", arguments: [before])
            return db.changesCount
        }
    }
}
