package import BrokerCore
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

    package func removePasskey(id: String, user: UserID) async throws -> Bool {
        let logger = logger
        return try await transaction("passkey removal") { connection in
            try await Self.first(
                Int.self,
                """
                WITH gone AS (DELETE FROM passkeys WHERE id = \(id) AND user_id = \(user.description) RETURNING 1)
                SELECT count(*)::int FROM gone
                """, connection, logger) == 1
        }
    }
}
