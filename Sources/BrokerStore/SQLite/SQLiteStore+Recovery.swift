package import BrokerCore
import BrokerSystem
import GRDB

/// Account recovery, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {
    package func createEmailLink(hash: [UInt8], user: UserID, purpose: String, expiresAt: Int64, now: Int64)
        async throws
    {
        try await write { db in
            try db.execute(
                sql: "UPDATE email_links SET used_at = ? WHERE user_id = ? AND purpose = ? AND used_at IS NULL",
                arguments: [now, user.description, purpose])
            try db.execute(
                sql: """
                    INSERT INTO email_links (hash, user_id, purpose, created_at, expires_at) VALUES (?, ?, ?, ?, ?)
                    """,
                arguments: [hash.hex, user.description, purpose, now, expiresAt])
        }
    }

    package func emailLinkUser(hash: [UInt8], purpose: String, now: Int64) async throws -> UserRecord? {
        try await read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT u.id, u.email AS user_email, u.name, u.created_at FROM email_links l
                    JOIN users u ON u.id = l.user_id
                    WHERE l.hash = ? AND l.purpose = ? AND l.used_at IS NULL AND l.expires_at > ?
                    """,
                arguments: [hash.hex, purpose, now]
            ).flatMap(Self.user)
        }
    }

    package func resetPassword(linkHash: [UInt8], passwordHash: String, now: Int64) async throws -> UserID? {
        try await write { db in
            guard
                let owner = try String.fetchOne(
                    db,
                    sql: """
                        SELECT user_id FROM email_links
                        WHERE hash = ? AND purpose = ? AND used_at IS NULL AND expires_at > ?
                        """,
                    arguments: [linkHash.hex, EmailLinkPurpose.reset, now]),
                let user = UserID(owner)
            else { return nil }
            try db.execute(
                sql: "UPDATE email_links SET used_at = ? WHERE user_id = ? AND purpose = ? AND used_at IS NULL",
                arguments: [now, owner, EmailLinkPurpose.reset])
            try db.execute(
                sql: "UPDATE password_accounts SET password_hash = ?, updated_at = ? WHERE user_id = ?",
                arguments: [passwordHash, now, owner])
            guard db.changesCount == 1 else { return nil }
            try Self.endEverySession(db, user: owner, now: now)
            return user
        }
    }

    package func verifyEmail(linkHash: [UInt8], now: Int64) async throws -> UserID? {
        try await write { db in
            try db.execute(
                sql: """
                    UPDATE email_links SET used_at = ?
                    WHERE hash = ? AND purpose = ? AND used_at IS NULL AND expires_at > ?
                    """,
                arguments: [now, linkHash.hex, EmailLinkPurpose.verify, now])
            guard db.changesCount == 1,
                let owner = try String.fetchOne(
                    db, sql: "SELECT user_id FROM email_links WHERE hash = ?", arguments: [linkHash.hex]),
                let user = UserID(owner)
            else { return nil }
            try db.execute(
                sql:
                    "UPDATE password_accounts SET email_verified_at = ? WHERE user_id = ? AND email_verified_at IS NULL",
                arguments: [now, owner])
            return user
        }
    }

    package func changePassword(
        user: UserID, from old: String, to new: String, keepingSession: String?, now: Int64
    ) async throws -> Bool {
        try await write { db in
            try db.execute(
                sql:
                    "UPDATE password_accounts SET password_hash = ?, updated_at = ? WHERE user_id = ? AND password_hash = ?",
                arguments: [new, now, user.description, old])
            guard db.changesCount == 1 else { return false }
            try db.execute(
                sql: "UPDATE sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL AND id IS NOT ?",
                arguments: [now, user.description, keepingSession])
            try Self.queueLogouts(db, where: "b.user_id = ?", [user.description], now: now)
            try db.execute(
                sql: "UPDATE browser_sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL",
                arguments: [now, user.description])
            // Reset links sent before the change must not undo it.
            try db.execute(
                sql: "UPDATE email_links SET used_at = ? WHERE user_id = ? AND used_at IS NULL",
                arguments: [now, user.description])
            return true
        }
    }

    static func user(_ row: Row) -> UserRecord? {
        guard let id = UserID(row["id"] as String) else { return nil }
        return UserRecord(id: id, email: row["user_email"], name: row["name"], createdAt: row["created_at"])
    }

    static func session(_ row: Row) -> SessionRecord? {
        guard let userID = UserID(row["user_id"] as String) else { return nil }
        return SessionRecord(
            id: row["id"],
            userID: userID,
            clientID: row["client_id"],
            scope: row["scope"],
            createdAt: row["created_at"],
            revokedAt: row["revoked_at"],
            signedInWith: (row["signed_in_with"] as String?).flatMap(ProviderID.init(rawValue:)),
            dpopJKT: row.hasColumn("dpop_jkt") ? row["dpop_jkt"] : nil,
            claims: row.hasColumn("claims") ? row["claims"] : nil
        )
    }
}
