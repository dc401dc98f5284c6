package import BrokerCore
import BrokerSystem
import GRDB

/// Administration, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {
    package func users(provider: ProviderID?) async throws -> [UserStatus] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT id, email AS user_email, name, created_at, disabled_at FROM users
                    WHERE ? IS NULL OR provider = ? ORDER BY created_at, id
                    """,
                arguments: [provider?.rawValue, provider?.rawValue]
            ).compactMap { row in Self.user(row).map { UserStatus(user: $0, disabledAt: row["disabled_at"]) } }
        }
    }

    package func userStatus(id: UserID) async throws -> UserStatus? {
        try await read { db in
            try Row.fetchOne(
                db, sql: "SELECT id, email AS user_email, name, created_at, disabled_at FROM users WHERE id = ?",
                arguments: [id.description]
            ).flatMap { row in Self.user(row).map { UserStatus(user: $0, disabledAt: row["disabled_at"]) } }
        }
    }

    package func setUserDisabled(id: UserID, disabled: Bool, now: Int64) async throws -> Bool {
        try await write { db in
            if disabled {
                try db.execute(
                    sql: "UPDATE users SET disabled_at = COALESCE(disabled_at, ?) WHERE id = ?",
                    arguments: [now, id.description])
            } else {
                try db.execute(sql: "UPDATE users SET disabled_at = NULL WHERE id = ?", arguments: [id.description])
            }
            guard db.changesCount == 1 else { return false }
            if disabled { try Self.endEverySession(db, user: id.description, now: now) }
            return true
        }
    }

    package func deleteUser(id: UserID, now: Int64) async throws -> Bool {
        try await write { db in
            try Self.queueLogouts(db, where: "b.user_id = ?", [id.description], now: now)
            try db.execute(sql: "DELETE FROM users WHERE id = ?", arguments: [id.description])
            return db.changesCount == 1
        }
    }

    package func sessions(user: UserID?) async throws -> [SessionRecord] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT id, user_id, client_id, scope, created_at, revoked_at, signed_in_with, dpop_jkt FROM sessions
                    WHERE ? IS NULL OR user_id = ? ORDER BY created_at DESC, id
                    """,
                arguments: [user?.description, user?.description]
            ).compactMap(Self.session)
        }
    }

    package func revokeSessions(user: UserID, now: Int64) async throws -> Int {
        try await write { db in try Self.endEverySession(db, user: user.description, now: now) }
    }

    /// Ends every session of `user` inside the caller's transaction — the API sessions, and the broker's own
    /// browser sign-ins with them (their apps' back-channel logouts queued; apps then ask the person to sign
    /// in again). Returns how many API sessions ended. (Disabling, a password reset, a passkey recovery and
    /// `broker sessions revoke` all end sessions this one way.)
    @discardableResult
    static func endEverySession(_ db: Database, user: String, now: Int64) throws -> Int {
        try db.execute(
            sql: "UPDATE sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL", arguments: [now, user])
        let count = db.changesCount
        try queueLogouts(db, where: "b.user_id = ?", [user], now: now)
        try db.execute(
            sql: "UPDATE browser_sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL",
            arguments: [now, user])
        return count
    }
}
