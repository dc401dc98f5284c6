package import BrokerCore

/// One audit event as stored (`server.audit_store`): its time, name and user for the queries, and the whole
/// JSON line as written to the audit log.
package struct AuditEventRecord: Sendable, Hashable {
    package var time: Int64
    package var event: String
    package var userID: String?
    package var document: String

    package init(time: Int64, event: String, userID: String?, document: String) {
        self.time = time
        self.event = event
        self.userID = userID
        self.document = document
    }
}

/// The audit trail in the database (`server.audit_store`), for `broker audit list`. Not copied by
/// `broker db copy`: it is history, not state.
package protocol AuditStore: Sendable {
    func appendAuditEvent(_ event: AuditEventRecord) async throws

    /// Events in the order they were stored (of one user, and from `since` on, when given), the newest `limit`.
    func auditEvents(user: UserID?, since: Int64?, limit: Int) async throws -> [AuditEventRecord]

    /// Deletes the events stored before `before` (`server.audit_retention`); how many went.
    @discardableResult func purgeAuditEvents(before: Int64) async throws -> Int
}
