public import BrokerCore
import GRDBSQLite
import Synchronization

/// The one read behind every `GET /auth/me` — a session and its user by session id — on read-only SQLite
/// connections of its own, run on the caller's thread.
///
/// Everything else in the store goes through GRDB. This query is the exception because it runs once per
/// authenticated request: GRDB's pool hands out a reader through a barrier dispatch queue, a semaphore
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
               u.email, u.name, u.created_at
        FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.id = ?1
        """

    init(path: String, keep: Int = 8) {
        self.path = path
        self.keep = keep
    }

    func sessionWithUser(id: String) throws(StoreError) -> (SessionRecord, UserRecord)? {
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
        return try connection.sessionWithUser(id: id)
    }

    /// One read-only connection and its prepared statement; used by one thread at a time (it is only
    /// reachable by whoever popped it off the free list).
    final class Connection: @unchecked Sendable {
        private let db: OpaquePointer
        private let statement: OpaquePointer

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
            let status = sqlite3_prepare_v3(
                handle,
                SessionLookup.sql,
                -1,
                UInt32(SQLITE_PREPARE_PERSISTENT),
                &prepared,
                nil
            )
            guard status == SQLITE_OK, let prepared else {
                let message = String(cString: sqlite3_errmsg(handle))
                sqlite3_close_v2(handle)
                throw StoreError.unavailable("cannot prepare the session lookup on \(path): \(message)")
            }
            db = handle
            statement = prepared
        }

        deinit {
            sqlite3_finalize(statement)
            sqlite3_close_v2(db)
        }

        func sessionWithUser(id: String) throws(StoreError) -> (SessionRecord, UserRecord)? {
            defer {
                sqlite3_reset(statement)
                sqlite3_clear_bindings(statement)
            }
            // SQLITE_TRANSIENT: SQLite copies the text before this call returns.
            let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
            guard sqlite3_bind_text(statement, 1, id, -1, transient) == SQLITE_OK else { throw failure("bind") }
            switch sqlite3_step(statement) {
            case SQLITE_DONE:
                return nil
            case SQLITE_ROW:
                guard let sessionID = text(0), let user = text(1).flatMap(UserID.init), let clientID = text(2)
                else { return nil }
                let session = SessionRecord(
                    id: sessionID,
                    userID: user,
                    clientID: clientID,
                    scope: text(3),
                    createdAt: sqlite3_column_int64(statement, 4),
                    revokedAt: integer(5)
                )
                let record = UserRecord(
                    id: user,
                    email: text(6),
                    name: text(7),
                    createdAt: sqlite3_column_int64(statement, 8)
                )
                return (session, record)
            default:
                throw failure("read")
            }
        }

        private func text(_ column: Int32) -> String? {
            guard sqlite3_column_type(statement, column) != SQLITE_NULL,
                let bytes = sqlite3_column_text(statement, column)
            else { return nil }
            return String(cString: bytes)
        }

        private func integer(_ column: Int32) -> Int64? {
            sqlite3_column_type(statement, column) == SQLITE_NULL ? nil : sqlite3_column_int64(statement, column)
        }

        private func failure(_ step: String) -> StoreError {
            .unavailable("session lookup (\(step)) failed: \(String(cString: sqlite3_errmsg(db)))")
        }
    }
}
