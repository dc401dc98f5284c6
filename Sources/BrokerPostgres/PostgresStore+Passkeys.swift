package import BrokerCore
package import BrokerStore
import PostgresNIO

/// The ``PasskeyStore`` facet on PostgreSQL (schema v15), in the same order as SQLite's.
extension PostgresStore {
    package func passkeyHandle(user: UserID, orInsert candidate: String) async throws -> String {
        let logger = logger
        return try await transaction("passkey handle") { connection in
            try await connection.query(
                """
                INSERT INTO passkey_users (user_id, handle) VALUES (\(user.description), \(candidate))
                ON CONFLICT (user_id) DO NOTHING
                """, logger: logger
            ).drain()
            return try await Self.first(
                String.self, "SELECT handle FROM passkey_users WHERE user_id = \(user.description)", connection, logger)
                ?? candidate
        }
    }

    package func passkeyUser(handle: String) async throws -> UserID? {
        let client = client
        return try await run("passkey user") {
            let rows = try await client.query("SELECT user_id FROM passkey_users WHERE handle = \(handle)")
                .decode(String.self)
            for try await user in rows { return UserID(user) }
            return nil
        }
    }

    package func addPasskey(_ passkey: PasskeyRecord) async throws {
        do {
            try await query(
                "passkey",
                """
                INSERT INTO passkeys (id, user_id, public_key, algorithm, sign_count, transports, backup_eligible,
                    backed_up, aaguid, name, created_at, last_used_at)
                VALUES (\(passkey.id), \(passkey.userID.description), \(passkey.publicKey.hex),
                    \(Int64(passkey.algorithm)), \(passkey.signCount), \(PasskeyRecord.encode(passkey.transports)),
                    \(Int64(passkey.backupEligible ? 1 : 0)), \(Int64(passkey.backedUp ? 1 : 0)), \(passkey.aaguid),
                    \(passkey.name), \(passkey.createdAt), \(passkey.lastUsedAt))
                """)
        } catch let error as StoreError where error.code == .conflict {
            throw StoreError.conflict("this passkey is already registered")
        }
    }

    typealias PasskeyRow = (
        String, String, String, Int64, Int64, String, Int64, Int64, String, String, Int64, Int64?
    )
    static func passkey(_ row: PasskeyRow) -> PasskeyRecord? {
        guard let user = UserID(row.1), let key = [UInt8](hex: row.2) else { return nil }
        return PasskeyRecord(
            id: row.0, userID: user, publicKey: key, algorithm: Int(row.3), signCount: row.4,
            transports: PasskeyRecord.decode(row.5), backupEligible: row.6 != 0, backedUp: row.7 != 0, aaguid: row.8,
            name: row.9, createdAt: row.10, lastUsedAt: row.11)
    }

    package func passkey(id: String) async throws -> PasskeyRecord? {
        let client = client
        return try await run("passkey lookup") {
            let rows = try await client.query(
                """
                SELECT id, user_id, public_key, algorithm, sign_count, transports, backup_eligible, backed_up, aaguid,
                    name, created_at, last_used_at FROM passkeys WHERE id = \(id)
                """
            ).decode(PasskeyRow.self)
            for try await row in rows { return Self.passkey(row) }
            return nil
        }
    }

    package func passkeys(user: UserID) async throws -> [PasskeyRecord] {
        let client = client
        return try await run("passkeys") {
            let rows = try await client.query(
                """
                SELECT id, user_id, public_key, algorithm, sign_count, transports, backup_eligible, backed_up, aaguid,
                    name, created_at, last_used_at FROM passkeys WHERE user_id = \(user.description)
                ORDER BY created_at, id
                """
            ).decode(PasskeyRow.self)
            var found: [PasskeyRecord] = []
            for try await row in rows { if let passkey = Self.passkey(row) { found.append(passkey) } }
            return found
        }
    }

    package func recordPasskeyUse(id: String, signCount: Int64, backedUp: Bool, now: Int64) async throws -> PasskeyUse {
        let logger = logger
        return try await transaction("passkey use") { connection in
            let updated = try await Self.first(
                Int.self,
                """
                WITH done AS (
                    UPDATE passkeys SET sign_count = \(signCount), backed_up = \(Int64(backedUp ? 1 : 0)),
                        last_used_at = \(now)
                    WHERE id = \(id) AND (sign_count < \(signCount) OR (sign_count = 0 AND \(signCount) = 0))
                    RETURNING 1)
                SELECT count(*)::int FROM done
                """, connection, logger)
            if updated == 1 { return .recorded }
            let exists = try await Self.first(Int.self, "SELECT 1 FROM passkeys WHERE id = \(id)", connection, logger)
            return exists == nil ? .unknown : .counterNotIncreased
        }
    }

    package func removePasskey(id: String, user: UserID, now: Int64) async throws -> PasskeyRemoval {
        let logger = logger
        return try await transaction("passkey removal") { connection in
            // The user's row lock orders this against an unlink or another removal: the last way in stays.
            guard try await Self.lockUser(user, connection, logger),
                try await Self.first(
                    Int.self, "SELECT 1 FROM passkeys WHERE id = \(id) AND user_id = \(user.description)", connection,
                    logger) != nil
            else { return .notFound }
            guard try await Self.waysIn(user, connection, logger) > 1 else { return .lastWayIn }
            try await connection.query(
                "DELETE FROM passkeys WHERE id = \(id) AND user_id = \(user.description)", logger: logger
            ).drain()
            return .removed
        }
    }

    /// How many ways in `user` has: linked identities, the password account, passkeys (inside the caller's
    /// transaction, after its ``lockUser(_:_:_:)``).
    static func waysIn(_ user: UserID, _ connection: PostgresConnection, _ logger: Logger) async throws -> Int64 {
        let id = user.description
        return try await first(
            Int64.self,
            """
            SELECT (SELECT COUNT(*) FROM identities WHERE user_id = \(id))
                + (SELECT COUNT(*) FROM password_accounts WHERE user_id = \(id))
                + (SELECT COUNT(*) FROM passkeys WHERE user_id = \(id))
            """, connection, logger) ?? 0
    }

    package func recoveryAddress(user: UserID) async throws -> RecoveryAddress? {
        let client = client
        return try await run("recovery address") {
            let rows = try await client.query(
                "SELECT email, verified_at FROM recovery_addresses WHERE user_id = \(user.description)"
            ).decode((String, Int64).self)
            for try await (email, verifiedAt) in rows { return RecoveryAddress(email: email, verifiedAt: verifiedAt) }
            return nil
        }
    }

    package func passkeyRecoveryUser(email: String) async throws -> UserRecord? {
        let client = client
        return try await run("passkey recovery user") {
            let rows = try await client.query(
                """
                SELECT u.id, u.email, u.name, u.created_at FROM recovery_addresses r
                JOIN users u ON u.id = r.user_id
                WHERE r.email = \(email) AND u.disabled_at IS NULL
                    AND NOT EXISTS (SELECT 1 FROM password_accounts a WHERE a.user_id = r.user_id)
                    AND NOT EXISTS (SELECT 1 FROM identities i WHERE i.user_id = r.user_id)
                    AND EXISTS (SELECT 1 FROM passkeys p WHERE p.user_id = r.user_id)
                ORDER BY r.verified_at DESC, r.user_id LIMIT 1
                """
            ).decode((String, String?, String?, Int64).self)
            for try await (id, userEmail, name, createdAt) in rows {
                guard let user = UserID(id) else { return nil }
                return UserRecord(id: user, email: userEmail, name: name, createdAt: createdAt)
            }
            return nil
        }
    }

    package func recoverWithPasskey(linkHash: [UInt8], user: UserID, now: Int64) async throws -> Bool {
        let logger = logger
        return try await transaction("passkey recovery") { connection in
            let owner = user.description
            guard
                try await Self.first(
                    Int.self,
                    """
                    UPDATE email_links SET used_at = \(now)
                    WHERE hash = \(linkHash.hex) AND user_id = \(owner) AND purpose = \(EmailLinkPurpose.passkeyRecovery)
                        AND used_at IS NULL AND expires_at > \(now)
                    RETURNING 1
                    """, connection, logger) != nil
            else { return false }
            try await connection.query(
                """
                UPDATE email_links SET used_at = \(now)
                WHERE user_id = \(owner) AND purpose = \(EmailLinkPurpose.passkeyRecovery) AND used_at IS NULL
                """, logger: logger
            ).drain()
            try await Self.endEverySession(of: owner, now: now, connection, logger)
            return true
        }
    }
}
