package import BrokerCore
package import BrokerStore
import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// Account recovery, on PostgreSQL: one facet of the store, in the same order in both dialects.
extension PostgresStore {
    package func passwordAccount(user: UserID) async throws -> PasswordAccount? {
        let client = client
        return try await run("account lookup") {
            let rows = try await client.query(
                """
                SELECT a.email, a.password_hash, a.email_verified_at, u.email, u.name, u.created_at
                FROM password_accounts a JOIN users u ON u.id = a.user_id WHERE a.user_id = \(user.description)
                """
            ).decode((String, String, Int64?, String?, String?, Int64).self)
            for try await (email, hash, verifiedAt, userEmail, name, created) in rows {
                return PasswordAccount(
                    user: UserRecord(id: user, email: userEmail, name: name, createdAt: created),
                    email: email, passwordHash: hash, emailVerifiedAt: verifiedAt)
            }
            return nil
        }
    }

    package func createEmailLink(hash: [UInt8], user: UserID, purpose: String, expiresAt: Int64, now: Int64)
        async throws
    {
        let logger = logger
        try await transaction("mail link") { connection in
            try await connection.query(
                """
                UPDATE email_links SET used_at = \(now)
                WHERE user_id = \(user.description) AND purpose = \(purpose) AND used_at IS NULL
                """, logger: logger
            ).drain()
            try await connection.query(
                """
                INSERT INTO email_links (hash, user_id, purpose, created_at, expires_at)
                VALUES (\(hash.hex), \(user.description), \(purpose), \(now), \(expiresAt))
                """, logger: logger
            ).drain()
        }
    }

    package func emailLinkUser(hash: [UInt8], purpose: String, now: Int64) async throws -> UserRecord? {
        let client = client
        return try await run("mail link lookup") {
            let rows = try await client.query(
                """
                SELECT u.id, u.email, u.name, u.created_at FROM email_links l JOIN users u ON u.id = l.user_id
                WHERE l.hash = \(hash.hex) AND l.purpose = \(purpose) AND l.used_at IS NULL AND l.expires_at > \(now)
                """
            ).decode((String, String?, String?, Int64).self)
            for try await (id, email, name, created) in rows {
                guard let userID = UserID(id) else { return nil }
                return UserRecord(id: userID, email: email, name: name, createdAt: created)
            }
            return nil
        }
    }

    package func resetPassword(linkHash: [UInt8], passwordHash: String, now: Int64) async throws -> UserID? {
        let logger = logger
        return try await transaction("password reset") { connection in
            guard
                let owner = try await Self.spendLink(
                    linkHash, purpose: EmailLinkPurpose.reset, now: now, connection, logger),
                let user = UserID(owner)
            else { return nil }
            try await connection.query(
                """
                UPDATE email_links SET used_at = \(now)
                WHERE user_id = \(owner) AND purpose = \(EmailLinkPurpose.reset) AND used_at IS NULL
                """, logger: logger
            ).drain()
            let updated = try await connection.query(
                """
                UPDATE password_accounts SET password_hash = \(passwordHash), updated_at = \(now)
                WHERE user_id = \(owner) RETURNING 1
                """, logger: logger
            ).decode(Int.self)
            var changed = false
            for try await _ in updated { changed = true }
            guard changed else { throw StoreError.conflict("the link's user has no password account") }
            try await Self.endEverySession(of: owner, now: now, connection, logger)
            return user
        }
    }

    /// Spends a live mail link of `purpose` (inside the caller's transaction) and returns its user id; spent by
    /// this UPDATE or not at all, so two requests with one link cannot both pass.
    static func spendLink(
        _ hash: [UInt8], purpose: String, now: Int64, _ connection: PostgresConnection, _ logger: Logger
    ) async throws -> String? {
        let spent = try await connection.query(
            """
            UPDATE email_links SET used_at = \(now)
            WHERE hash = \(hash.hex) AND purpose = \(purpose) AND used_at IS NULL AND expires_at > \(now)
            RETURNING user_id
            """, logger: logger
        ).decode(String.self)
        var owner: String?
        for try await id in spent { owner = id }
        return owner
    }

    package func verifyEmail(linkHash: [UInt8], now: Int64) async throws -> UserID? {
        let logger = logger
        return try await transaction("address verification") { connection in
            guard
                let owner = try await Self.spendLink(
                    linkHash, purpose: EmailLinkPurpose.verify, now: now, connection, logger),
                let user = UserID(owner)
            else { return nil }
            try await connection.query(
                """
                UPDATE password_accounts SET email_verified_at = \(now)
                WHERE user_id = \(owner) AND email_verified_at IS NULL
                """, logger: logger
            ).drain()
            return user
        }
    }

    package func changePassword(
        user: UserID, from old: String, to new: String, keepingSession: String?, now: Int64
    ) async throws -> Bool {
        let logger = logger
        return try await transaction("password change") { connection in
            let updated = try await connection.query(
                """
                UPDATE password_accounts SET password_hash = \(new), updated_at = \(now)
                WHERE user_id = \(user.description) AND password_hash = \(old) RETURNING 1
                """, logger: logger
            ).decode(Int.self)
            var changed = false
            for try await _ in updated { changed = true }
            guard changed else { return false }
            try await connection.query(
                """
                UPDATE sessions SET revoked_at = \(now) WHERE user_id = \(user.description) AND revoked_at IS NULL
                AND id IS DISTINCT FROM \(keepingSession)
                """, logger: logger
            ).drain()
            try await Self.queueLogouts(connection, user: user.description, now: now, logger: logger)
            try await connection.query(
                """
                UPDATE browser_sessions SET revoked_at = \(now)
                WHERE user_id = \(user.description) AND revoked_at IS NULL
                """, logger: logger
            ).drain()
            try await connection.query(
                "UPDATE email_links SET used_at = \(now) WHERE user_id = \(user.description) AND used_at IS NULL",
                logger: logger
            ).drain()
            return true
        }
    }

}
