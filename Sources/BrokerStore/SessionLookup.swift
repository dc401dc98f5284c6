import BrokerCore
import GRDBSQLite
import Synchronization

/// The reads behind every `GET /auth/me` (a session and its user by session id) and every CI mint (a
/// client by name), on read-only SQLite connections of their own, run on the caller's thread.
///
/// Everything else in the store goes through GRDB. These queries are the exception because they run once
/// per request: GRDB's pool hands out a reader through a barrier dispatch queue, a semaphore
/// and a serial queue per connection, which cost more than the query and the ES256 verification together
/// in `Benchmarks/server.sh`. Here a connection is taken from a mutex-guarded free list, its prepared
/// statement bound, stepped once and reset, and the connection given back.
///
/// In WAL mode a reader never waits for the writer, and a statement outside a transaction sees every
/// transaction committed before it started, so a revocation is visible to the very next request.
final class SessionLookup: Sendable {
    private let path: String
    private let idle = Mutex<[Connection]>([])
    /// Connections kept for reuse; more may be open briefly under a burst, then closed.
    private let keep: Int

    static let sql = """
        SELECT s.id, s.user_id, s.client_id, s.scope, s.created_at, s.revoked_at,
               u.email, u.name, u.created_at, s.signed_in_with, a.email_verified_at
        FROM sessions s JOIN users u ON u.id = s.user_id LEFT JOIN password_accounts a ON a.user_id = u.id
        WHERE s.id = ?1
        """

    static let clientSQL = """
        SELECT name, secret_hash, scopes, trust_issuer, trust_subject, trust_audience, trust_max_age, created_at
        FROM clients WHERE name = ?1
        """

    /// Whether a state marker (a DPoP proof's `jti`, a flow's state) was spent: read before every DPoP-bound
    /// request is let through.
    static let markerSQL = "SELECT 1 FROM state_markers WHERE marker = ?1"

    init(path: String, keep: Int = 8) {
        self.path = path
        self.keep = keep
    }

    func sessionWithUser(id: String) throws(StoreError) -> SessionView? {
        try withConnection { connection throws(StoreError) in try connection.sessionWithUser(id: id) }
    }

    func client(name: String) throws(StoreError) -> ClientRecord? {
        try withConnection { connection throws(StoreError) in try connection.client(name: name) }
    }

    func isMarkerSpent(_ marker: String) throws(StoreError) -> Bool {
        try withConnection { connection throws(StoreError) in try connection.isMarkerSpent(marker) }
    }

    private func withConnection<T>(_ body: (Connection) throws(StoreError) -> T) throws(StoreError) -> T {
        let connection: Connection
        if let reused = idle.withLock({ $0.popLast() }) {
            connection = reused
        } else {
            connection = try Connection(path: path)
        }
        defer {
            idle.withLock { connections in
                if connections.count < keep { connections.append(connection) }
            }
        }
        return try body(connection)
    }

    /// One read-only connection and its prepared statement; used by one thread at a time (it is only
    /// reachable by whoever popped it off the free list).
    final class Connection: @unchecked Sendable {
        private let db: OpaquePointer
        private let statement: OpaquePointer
        private let clientStatement: OpaquePointer
        private let markerStatement: OpaquePointer

        init(path: String) throws(StoreError) {
            var handle: OpaquePointer?
            let flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX
            let opened = sqlite3_open_v2(path, &handle, flags, nil)
            guard opened == SQLITE_OK, let handle else {
                let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
                sqlite3_close_v2(handle)
                throw StoreError.unavailable("cannot open \(path) for reading: \(message)")
            }
            sqlite3_busy_timeout(handle, 10_000)
            var prepared: OpaquePointer?
            var preparedClient: OpaquePointer?
            var preparedMarker: OpaquePointer?
            let persistent = UInt32(SQLITE_PREPARE_PERSISTENT)
            guard sqlite3_prepare_v3(handle, SessionLookup.sql, -1, persistent, &prepared, nil) == SQLITE_OK,
                sqlite3_prepare_v3(handle, SessionLookup.clientSQL, -1, persistent, &preparedClient, nil)
                    == SQLITE_OK,
                sqlite3_prepare_v3(handle, SessionLookup.markerSQL, -1, persistent, &preparedMarker, nil)
                    == SQLITE_OK,
                let prepared, let preparedClient, let preparedMarker
            else {
                let message = String(cString: sqlite3_errmsg(handle))
                sqlite3_finalize(prepared)
                sqlite3_finalize(preparedClient)
                sqlite3_finalize(preparedMarker)
                sqlite3_close_v2(handle)
                throw StoreError.unavailable("cannot prepare the hot-path reads on \(path): \(message)")
            }
            db = handle
            statement = prepared
            clientStatement = preparedClient
            markerStatement = preparedMarker
        }

        deinit {
            sqlite3_finalize(statement)
            sqlite3_finalize(clientStatement)
            sqlite3_finalize(markerStatement)
            sqlite3_close_v2(db)
        }

        /// Binds `value` as `statement`'s one parameter, steps it once and hands the row, if there is one, to
        /// `read`; the statement is reset for its next use whatever happens.
        private func firstRow<T>(_ statement: OpaquePointer, _ value: String, _ read: (OpaquePointer) -> T?)
            throws(StoreError) -> T?
        {
            defer {
                sqlite3_reset(statement)
                sqlite3_clear_bindings(statement)
            }
            // SQLITE_TRANSIENT: SQLite copies the text before this call returns.
            let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
            guard sqlite3_bind_text(statement, 1, value, -1, transient) == SQLITE_OK else { throw failure("bind") }
            switch sqlite3_step(statement) {
            case SQLITE_DONE: return nil
            case SQLITE_ROW: return read(statement)
            default: throw failure("read")
            }
        }

        func client(name: String) throws(StoreError) -> ClientRecord? {
            try firstRow(clientStatement, name) { row in
                guard let name = text(row, 0), let hash = text(row, 1), let scopes = text(row, 2) else { return nil }
                var trust: TrustPolicy?
                if let issuer = text(row, 3), let subject = text(row, 4) {
                    trust = TrustPolicy(
                        issuer: issuer,
                        subjectPattern: subject,
                        audience: text(row, 5) ?? "broker",
                        maxAge: integer(row, 6) ?? 600
                    )
                }
                return ClientRecord(
                    name: name,
                    secretHash: hash.isEmpty ? nil : hash,
                    // Split at the bytes (scopes are printable ASCII, `ClientRules.validScope`): splitting the
                    // string by `Character`s walked grapheme breaks, 2,853 instructions a read under callgrind.
                    scopes: scopes.utf8.split(separator: UInt8(ascii: " ")).map { String(Substring($0)) },
                    trust: trust,
                    createdAt: sqlite3_column_int64(row, 7)
                )
            }
        }

        func isMarkerSpent(_ marker: String) throws(StoreError) -> Bool {
            try firstRow(markerStatement, marker) { _ in true } ?? false
        }

        func sessionWithUser(id: String) throws(StoreError) -> SessionView? {
            try firstRow(statement, id) { _ in
                guard let sessionID = text(0), let user = text(1).flatMap(UserID.init), let clientID = text(2)
                else { return nil }
                let session = SessionRecord(
                    id: sessionID,
                    userID: user,
                    clientID: clientID,
                    scope: text(3),
                    createdAt: sqlite3_column_int64(statement, 4),
                    revokedAt: integer(5),
                    signedInWith: text(9).flatMap(ProviderID.init(rawValue:))
                )
                let record = UserRecord(
                    id: user,
                    email: text(6),
                    name: text(7),
                    createdAt: sqlite3_column_int64(statement, 8)
                )
                return SessionView(session: session, user: record, emailVerifiedAt: integer(10))
            }
        }

        private func text(_ column: Int32) -> String? { text(statement, column) }

        private func integer(_ column: Int32) -> Int64? { integer(statement, column) }

        private func text(_ row: OpaquePointer, _ column: Int32) -> String? {
            guard sqlite3_column_type(row, column) != SQLITE_NULL, let bytes = sqlite3_column_text(row, column)
            else { return nil }
            return String(cString: bytes)
        }

        private func integer(_ row: OpaquePointer, _ column: Int32) -> Int64? {
            sqlite3_column_type(row, column) == SQLITE_NULL ? nil : sqlite3_column_int64(row, column)
        }

        private func failure(_ step: String) -> StoreError {
            .unavailable("session lookup (\(step)) failed: \(String(cString: sqlite3_errmsg(db)))")
        }
    }
}
