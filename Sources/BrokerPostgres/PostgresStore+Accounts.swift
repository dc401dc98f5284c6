import BrokerCore
package import BrokerStore
import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// Accounts and users, on PostgreSQL: one facet of the store, in the same order in both dialects.
extension PostgresStore {
    package func createPasswordAccount(user: UserRecord, email: String, passwordHash: String, verifiedAt: Int64?)
        async throws
    {
        let logger = logger
        do {
            try await transaction("registration") { connection in
                try await Self.insert(user, connection, logger)
                try await connection.query(
                    """
                    INSERT INTO password_accounts (email, user_id, password_hash, updated_at, email_verified_at)
                    VALUES (\(email), \(user.id.description), \(passwordHash), \(user.createdAt), \(verifiedAt))
                    """, logger: logger
                ).drain()
            }
        } catch let error as StoreError where error.code == .conflict {
            throw StoreError.conflict("an account with this email exists")
        }
    }

    package func passwordAccount(email: String) async throws -> PasswordAccount? {
        let client = client
        return try await run("account lookup") {
            let rows = try await client.query(
                """
                SELECT a.email, a.password_hash, a.email_verified_at, u.id, u.email, u.name, u.created_at
                FROM password_accounts a JOIN users u ON u.id = a.user_id WHERE a.email = \(email)
                """
            ).decode((String, String, Int64?, String, String?, String?, Int64).self)
            for try await (email, hash, verifiedAt, id, userEmail, name, created) in rows {
                guard let userID = UserID(id) else { return nil }
                return PasswordAccount(
                    user: UserRecord(id: userID, email: userEmail, name: name, createdAt: created),
                    email: email, passwordHash: hash, emailVerifiedAt: verifiedAt)
            }
            return nil
        }
    }

    package func updatePasswordHash(email: String, from old: String, to new: String) async throws {
        try await query(
            "password rehash",
            """
            UPDATE password_accounts SET password_hash = \(new), updated_at = EXTRACT(EPOCH FROM now())::BIGINT
            WHERE email = \(email) AND password_hash = \(old)
            """)
    }

    package func signIn(_ identity: IdentityRecord, now: Int64) async throws -> IdentitySignIn {
        // Two first sign-ins of one identity at once: one inserts; the other meets the unique key, or (each
        // statement reads what is committed by then) finds the user but not, a moment earlier, the identity.
        // Tried again, it finds the identity the first one linked.
        do {
            let first = try await signInOnce(identity, now: now)
            guard case .unlinked = first else { return first }
            return try await signInOnce(identity, now: now)
        } catch let error as StoreError where error.code == .conflict {
            return try await signInOnce(identity, now: now)
        }
    }

    func signInOnce(_ identity: IdentityRecord, now: Int64, function: StaticString = #function) async throws
        -> IdentitySignIn
    {
        let logger = logger
        return try await transaction("identity sign-in", function: function) { connection in
            let owners = try await connection.query(
                """
                UPDATE identities SET email = \(identity.email), name = COALESCE(\(identity.name), name)
                WHERE provider = \(identity.provider.rawValue) AND subject = \(identity.subject) RETURNING user_id
                """, logger: logger
            ).decode(String.self)
            var owner: String?
            for try await found in owners { owner = found }
            if let owner {
                // The user's own email and name follow the identity their id was made from.
                if owner == identity.derivedUserID.description {
                    try await connection.query(
                        "UPDATE users SET email = \(identity.email), name = COALESCE(\(identity.name), name) WHERE id = \(owner)",
                        logger: logger
                    ).drain()
                    // Its profile too, when the provider sent one; the time only when it changed.
                    if let profile = identity.profileText {
                        try await connection.query(
                            """
                            UPDATE users SET profile_updated_at = CASE WHEN profile IS NOT DISTINCT FROM \(profile)
                                THEN profile_updated_at ELSE \(now) END, profile = \(profile) WHERE id = \(owner)
                            """, logger: logger
                        ).drain()
                    }
                }
                let rows = try await connection.query(
                    "SELECT email, name, created_at FROM users WHERE id = \(owner)", logger: logger
                ).decode((String?, String?, Int64).self)
                for try await (email, name, created) in rows {
                    guard let id = UserID(owner) else { break }
                    return .user(UserRecord(id: id, email: email, name: name, createdAt: created))
                }
                throw StoreError.unavailable("the identity's user \(owner) is missing")
            }
            let id = identity.derivedUserID
            let existing = try await connection.query(
                "SELECT 1 FROM users WHERE id = \(id.description)", logger: logger
            ).decode(Int.self)
            for try await _ in existing { return .unlinked(from: id) }
            let user = UserRecord(id: id, email: identity.email, name: identity.name, createdAt: now)
            try await Self.insert(user, connection, logger)
            if let profile = identity.profileText {
                try await connection.query(
                    "UPDATE users SET profile = \(profile), profile_updated_at = \(now) WHERE id = \(id.description)",
                    logger: logger
                ).drain()
            }
            try await Self.insert(identity, user: id, now: now, connection, logger)
            return .user(user)
        }
    }

    static func insert(
        _ identity: IdentityRecord, user: UserID, now: Int64, _ connection: PostgresConnection, _ logger: Logger
    ) async throws {
        try await connection.query(
            """
            INSERT INTO identities (provider, subject, user_id, email, name, linked_at)
            VALUES (\(identity.provider.rawValue), \(identity.subject), \(user.description), \(identity.email),
                    \(identity.name), \(now))
            """, logger: logger
        ).drain()
    }

    /// Locks `user`'s row for the rest of the transaction (one change to a user's ways in at a time);
    /// `false` when there is no such user.
    static func lockUser(_ user: UserID, _ connection: PostgresConnection, _ logger: Logger) async throws
        -> Bool
    {
        let rows = try await connection.query(
            "SELECT 1 FROM users WHERE id = \(user.description) FOR UPDATE", logger: logger
        ).decode(Int.self)
        for try await _ in rows { return true }
        return false
    }

    /// The first column of the first row of `query`, if any.
    static func first<T: PostgresDecodable & Sendable>(
        _ type: T.Type, _ query: PostgresQuery, _ connection: PostgresConnection, _ logger: Logger
    ) async throws -> T? {
        for try await value in try await connection.query(query, logger: logger).decode(T.self) { return value }
        return nil
    }
}
