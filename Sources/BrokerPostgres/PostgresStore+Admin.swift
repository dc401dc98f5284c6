package import BrokerCore
package import BrokerStore
import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// Administration, on PostgreSQL: one facet of the store, in the same order in both dialects.
extension PostgresStore {
    package func users(provider: ProviderID?) async throws -> [UserStatus] {
        let client = client
        let filter = provider?.rawValue
        return try await run("user list") {
            var users: [UserStatus] = []
            let rows = try await client.query(
                """
                SELECT id, email, name, created_at, disabled_at FROM users
                WHERE \(filter)::text IS NULL OR provider = \(filter) ORDER BY created_at, id
                """
            ).decode((String, String?, String?, Int64, Int64?).self)
            for try await (id, email, name, created, disabled) in rows {
                guard let userID = UserID(id) else { continue }
                users.append(
                    UserStatus(
                        user: UserRecord(id: userID, email: email, name: name, createdAt: created),
                        disabledAt: disabled))
            }
            return users
        }
    }

    package func userStatus(id: UserID) async throws -> UserStatus? {
        let client = client
        return try await run("user lookup") {
            let rows = try await client.query(
                "SELECT email, name, created_at, disabled_at FROM users WHERE id = \(id.description)"
            ).decode((String?, String?, Int64, Int64?).self)
            for try await (email, name, created, disabled) in rows {
                return UserStatus(
                    user: UserRecord(id: id, email: email, name: name, createdAt: created), disabledAt: disabled)
            }
            return nil
        }
    }

    package func setUserDisabled(id: UserID, disabled: Bool, now: Int64) async throws -> Bool {
        let logger = logger
        return try await transaction("user disable") { connection in
            let stamp: Int64? = disabled ? now : nil
            let rows = try await connection.query(
                """
                UPDATE users SET disabled_at = CASE WHEN \(stamp)::bigint IS NULL THEN NULL
                                                    ELSE COALESCE(disabled_at, \(stamp)::bigint) END
                WHERE id = \(id.description) RETURNING 1
                """, logger: logger
            ).decode(Int.self)
            var found = false
            for try await _ in rows { found = true }
            guard found else { return false }
            if disabled { try await Self.endEverySession(of: id.description, now: now, connection, logger) }
            return true
        }
    }

    package func deleteUser(id: UserID, now: Int64) async throws -> Bool {
        let logger = logger
        return try await transaction("user deletion") { connection in
            try await Self.queueLogouts(connection, user: id.description, now: now, logger: logger)
            let rows = try await connection.query(
                "DELETE FROM users WHERE id = \(id.description) RETURNING 1", logger: logger
            ).decode(Int.self)
            for try await _ in rows { return true }
            return false
        }
    }

    package func sessions(user: UserID?) async throws -> [SessionRecord] {
        let client = client
        let filter = user?.description
        return try await run("session list") {
            var sessions: [SessionRecord] = []
            let rows = try await client.query(
                """
                SELECT id, user_id, client_id, scope, created_at, revoked_at, signed_in_with, dpop_jkt FROM sessions
                WHERE \(filter)::text IS NULL OR user_id = \(filter) ORDER BY created_at DESC, id
                """
            ).decode((String, String, String, String?, Int64, Int64?, String?, String?).self)
            for try await (id, owner, clientID, scope, created, revoked, way, bound) in rows {
                guard let userID = UserID(owner) else { continue }
                sessions.append(
                    SessionRecord(
                        id: id, userID: userID, clientID: clientID, scope: scope, createdAt: created,
                        revokedAt: revoked, signedInWith: way.flatMap(ProviderID.init(rawValue:)), dpopJKT: bound))
            }
            return sessions
        }
    }

    package func revokeSessions(user: UserID, now: Int64) async throws -> Int {
        let logger = logger
        return try await transaction("revocation") { connection in
            try await Self.endEverySession(of: user.description, now: now, connection, logger)
        }
    }

    /// Ends every session of `user` inside the caller's transaction — the API sessions, and the broker's own
    /// browser sign-ins with them (their apps' back-channel logouts queued first). Returns how many API
    /// sessions ended. (Disabling, a password reset, a passkey recovery and `broker sessions revoke` all end
    /// sessions this one way.)
    @discardableResult
    static func endEverySession(of user: String, now: Int64, _ connection: PostgresConnection, _ logger: Logger)
        async throws -> Int
    {
        try await queueLogouts(connection, user: user, now: now, logger: logger)
        let rows = try await connection.query(
            """
            WITH browsers AS (
                UPDATE browser_sessions SET revoked_at = \(now) WHERE user_id = \(user) AND revoked_at IS NULL
            )
            UPDATE sessions SET revoked_at = \(now) WHERE user_id = \(user) AND revoked_at IS NULL RETURNING 1
            """, logger: logger
        ).decode(Int.self)
        var count = 0
        for try await _ in rows { count += 1 }
        return count
    }

    /// A session, its user and the password account's confirmation from the columns `SessionsWithUser` and
    /// `RotateRefreshToken` both read; `nil` for a stored user id that does not parse.
    static func sessionView(
        id: String, user: String, clientID: String, scope: String?, createdAt: Int64, revokedAt: Int64?,
        email: String?, name: String?, userCreatedAt: Int64, signedInWith: String?, emailVerifiedAt: Int64?
    ) -> SessionView? {
        guard let userID = UserID(user) else { return nil }
        return SessionView(
            session: SessionRecord(
                id: id, userID: userID, clientID: clientID, scope: scope, createdAt: createdAt, revokedAt: revokedAt,
                signedInWith: signedInWith.flatMap(ProviderID.init(rawValue:))),
            user: UserRecord(id: userID, email: email, name: name, createdAt: userCreatedAt),
            emailVerifiedAt: emailVerifiedAt)
    }
}
