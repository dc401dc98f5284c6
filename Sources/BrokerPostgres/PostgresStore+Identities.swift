package import BrokerCore
package import BrokerStore
import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// Linked identities, on PostgreSQL: one facet of the store, in the same order in both dialects.
extension PostgresStore {
    package func identities(user: UserID) async throws -> [LinkedIdentity] {
        let client = client
        return try await run("identities") {
            let rows = try await client.query(
                """
                SELECT provider, subject, email, name, linked_at FROM identities WHERE user_id = \(user.description)
                ORDER BY linked_at, provider
                """
            ).decode((String, String, String?, String?, Int64).self)
            var linked: [LinkedIdentity] = []
            for try await (provider, subject, email, name, linkedAt) in rows {
                guard let provider = ProviderID(rawValue: provider) else { continue }
                linked.append(
                    LinkedIdentity(
                        identity: IdentityRecord(provider: provider, subject: subject, email: email, name: name),
                        userID: user, linkedAt: linkedAt))
            }
            return linked
        }
    }

    package func identityOwner(provider: ProviderID, subject: String) async throws -> UserID? {
        let client = client
        return try await run("identity owner") {
            let rows = try await client.query(
                "SELECT user_id FROM identities WHERE provider = \(provider.rawValue) AND subject = \(subject)"
            ).decode(String.self)
            for try await owner in rows { return UserID(owner) }
            return nil
        }
    }

    package func linkIdentity(_ identity: IdentityRecord, to user: UserID, now: Int64) async throws -> LinkOutcome {
        // The unique keys decide between two links at once; the loser, tried again, sees why it lost.
        do {
            return try await linkIdentityOnce(identity, to: user, now: now)
        } catch let error as StoreError where error.code == .conflict {
            return try await linkIdentityOnce(identity, to: user, now: now)
        }
    }

    func linkIdentityOnce(
        _ identity: IdentityRecord, to user: UserID, now: Int64, function: StaticString = #function
    ) async throws -> LinkOutcome {
        let logger = logger
        return try await transaction("identity link", function: function) { connection in
            guard try await Self.lockUser(user, connection, logger) else { return .userMissing }
            if let owner = try await Self.first(
                String.self,
                """
                SELECT user_id FROM identities
                WHERE provider = \(identity.provider.rawValue) AND subject = \(identity.subject)
                """, connection, logger)
            {
                return owner == user.description ? .alreadyLinked : .ownedByAnotherUser
            }
            if let other = try await Self.first(
                String.self,
                """
                SELECT subject FROM identities
                WHERE user_id = \(user.description) AND provider = \(identity.provider.rawValue)
                """, connection, logger)
            {
                return .providerTaken(subject: other)
            }
            // An identity unlinked from the user its id was made from may return to that user only.
            if identity.derivedUserID != user,
                try await Self.first(
                    Int.self, "SELECT 1 FROM users WHERE id = \(identity.derivedUserID.description)", connection, logger
                ) != nil
            {
                return .ownedByAnotherUser
            }
            try await Self.insert(identity, user: user, now: now, connection, logger)
            return .linked
        }
    }

    package func addPasswordAccount(user: UserID, email: String, passwordHash: String, now: Int64) async throws
        -> PasswordLinkOutcome
    {
        let logger = logger
        do {
            return try await transaction("password link") { connection in
                guard try await Self.lockUser(user, connection, logger) else { return .userMissing }
                if try await Self.first(
                    Int.self, "SELECT 1 FROM password_accounts WHERE user_id = \(user.description)", connection,
                    logger) != nil
                {
                    return .alreadyHasOne
                }
                let inserted = try await Self.first(
                    Int.self,
                    """
                    INSERT INTO password_accounts (email, user_id, password_hash, updated_at)
                    VALUES (\(email), \(user.description), \(passwordHash), \(now))
                    ON CONFLICT (email) DO NOTHING RETURNING 1
                    """, connection, logger)
                return inserted == nil ? .emailTaken : .added
            }
        } catch let error as StoreError where error.code == .conflict {
            // The user_id key: a second account for this user won a race.
            return .alreadyHasOne
        }
    }

    package func releaseUnverifiedAddress(email: String, now: Int64) async throws -> ReleasedAddress? {
        let logger = logger
        return try await transaction("address release") { connection in
            guard
                let owner = try await Self.first(
                    String.self,
                    "SELECT user_id FROM password_accounts WHERE email = \(email) AND email_verified_at IS NULL",
                    connection, logger),
                let user = UserID(owner)
            else { return nil }
            // The user's row first, as every change to a user's ways in does (one order, no deadlock).
            guard try await Self.lockUser(user, connection, logger) else { return nil }
            let deleted = try await Self.first(
                Int.self,
                """
                WITH gone AS (
                    DELETE FROM password_accounts WHERE email = \(email) AND user_id = \(owner)
                    AND email_verified_at IS NULL RETURNING 1
                ) SELECT count(*)::int FROM gone
                """, connection, logger)
            guard deleted == 1 else { return nil }
            try await connection.query(
                "UPDATE email_links SET used_at = \(now) WHERE user_id = \(owner) AND used_at IS NULL", logger: logger
            ).drain()
            try await connection.query(
                """
                UPDATE sessions SET revoked_at = \(now)
                WHERE user_id = \(owner) AND signed_in_with IN (\(ProviderID.custom.recordedWays.0), \(ProviderID.custom.recordedWays.1)) AND revoked_at IS NULL
                """, logger: logger
            ).drain()
            try await Self.queueLogouts(
                connection, user: owner, provider: ProviderID.custom.recordedWays, now: now, logger: logger)
            try await connection.query(
                """
                UPDATE browser_sessions SET revoked_at = \(now)
                WHERE user_id = \(owner) AND signed_in_with IN (\(ProviderID.custom.recordedWays.0), \(ProviderID.custom.recordedWays.1)) AND revoked_at IS NULL
                """, logger: logger
            ).drain()
            let others =
                try await Self.first(
                    Int64.self, "SELECT COUNT(*) FROM identities WHERE user_id = \(owner)", connection, logger) ?? 0
            if others == 0 {
                try await connection.query("DELETE FROM users WHERE id = \(owner)", logger: logger).drain()
            }
            return ReleasedAddress(user: user, userDeleted: others == 0)
        }
    }

    package func unlinkIdentity(user: UserID, provider: ProviderID, now: Int64) async throws -> UnlinkOutcome {
        let logger = logger
        return try await transaction("identity unlink") { connection in
            guard try await Self.lockUser(user, connection, logger) else { return .notLinked }
            let has: Bool
            if provider == .custom {
                has =
                    try await Self.first(
                        Int.self, "SELECT 1 FROM password_accounts WHERE user_id = \(user.description)", connection,
                        logger) != nil
            } else {
                has =
                    try await Self.first(
                        Int.self,
                        """
                        SELECT 1 FROM identities WHERE user_id = \(user.description) AND provider = \(provider.rawValue)
                        """, connection, logger) != nil
            }
            guard has else { return .notLinked }
            guard try await Self.waysIn(user, connection, logger) > 1 else { return .lastWayIn }
            if provider == .custom {
                // A verified address outlives the password: an account left with passkeys only recovers by mail.
                try await connection.query(
                    """
                    INSERT INTO recovery_addresses (user_id, email, verified_at)
                    SELECT user_id, email, email_verified_at FROM password_accounts
                    WHERE user_id = \(user.description) AND email_verified_at IS NOT NULL
                    ON CONFLICT (user_id) DO UPDATE SET email = excluded.email, verified_at = excluded.verified_at
                    """, logger: logger
                ).drain()
                try await connection.query(
                    "DELETE FROM password_accounts WHERE user_id = \(user.description)", logger: logger
                ).drain()
                try await connection.query(
                    """
                    UPDATE email_links SET used_at = \(now) WHERE user_id = \(user.description) AND used_at IS NULL
                    """, logger: logger
                ).drain()
            } else {
                try await connection.query(
                    """
                    DELETE FROM identities WHERE user_id = \(user.description) AND provider = \(provider.rawValue)
                    """, logger: logger
                ).drain()
            }
            let rows = try await connection.query(
                """
                UPDATE sessions SET revoked_at = \(now)
                WHERE user_id = \(user.description) AND signed_in_with IN (\(provider.recordedWays.0), \(provider.recordedWays.1)) AND revoked_at IS NULL
                RETURNING id
                """, logger: logger
            ).decode(String.self)
            var ended: [String] = []
            for try await id in rows { ended.append(id) }
            try await Self.queueLogouts(
                connection, user: user.description, provider: provider.recordedWays, now: now, logger: logger)
            try await connection.query(
                """
                UPDATE browser_sessions SET revoked_at = \(now)
                WHERE user_id = \(user.description) AND signed_in_with IN (\(provider.recordedWays.0), \(provider.recordedWays.1)) AND revoked_at IS NULL
                """, logger: logger
            ).drain()
            return .unlinked(endedSessions: ended.sorted())
        }
    }

    package func userProfile(id: UserID) async throws -> UserProfile? {
        let client = client
        return try await run("user profile") {
            let rows = try await client.query(
                "SELECT profile, profile_updated_at, created_at FROM users WHERE id = \(id.description)"
            ).decode((String?, Int64?, Int64).self)
            for try await (text, updated, created) in rows {
                return UserProfile(text: text, updatedAt: updated, createdAt: created)
            }
            return nil
        }
    }

    package func user(id: UserID) async throws -> UserRecord? {
        let client = client
        return try await run("user lookup") {
            let rows = try await client.query(
                "SELECT email, name, created_at FROM users WHERE id = \(id.description)"
            ).decode((String?, String?, Int64).self)
            for try await (email, name, created) in rows {
                return UserRecord(id: id, email: email, name: name, createdAt: created)
            }
            return nil
        }
    }

    static func insert(_ user: UserRecord, _ connection: PostgresConnection, _ logger: Logger) async throws {
        try await connection.query(
            """
            INSERT INTO users (id, provider, subject, email, name, created_at)
            VALUES (\(user.id.description), \(user.id.provider.rawValue), \(user.id.subject), \(user.email),
                    \(user.name), \(user.createdAt))
            """, logger: logger
        ).drain()
    }
}
