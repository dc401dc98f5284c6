package import BrokerCore
import GRDB

/// The ``PasskeyStore`` facet on SQLite (schema v15).
extension SQLiteStore {
    package func passkeyHandle(user: UserID, orInsert candidate: String) async throws -> String {
        do {
            return try await write { db in
                try db.execute(
                    sql: "INSERT INTO passkey_users (user_id, handle) VALUES (?, ?) ON CONFLICT (user_id) DO NOTHING",
                    arguments: [user.description, candidate])
                return try String.fetchOne(
                    db, sql: "SELECT handle FROM passkey_users WHERE user_id = ?", arguments: [user.description])
                    ?? candidate
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.conflict("this passkey user handle belongs to another user")
        }
    }

    package func passkeyUser(handle: String) async throws -> UserID? {
        try await read { db in
            try String.fetchOne(db, sql: "SELECT user_id FROM passkey_users WHERE handle = ?", arguments: [handle])
                .flatMap(UserID.init)
        }
    }

    package func addPasskey(_ passkey: PasskeyRecord) async throws {
        do {
            try await write { db in
                try db.execute(
                    sql: """
                        INSERT INTO passkeys (id, user_id, public_key, algorithm, sign_count, transports,
                            backup_eligible, backed_up, aaguid, name, created_at, last_used_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        passkey.id, passkey.userID.description, passkey.publicKey.hex, passkey.algorithm,
                        passkey.signCount, PasskeyRecord.encode(passkey.transports), passkey.backupEligible ? 1 : 0,
                        passkey.backedUp ? 1 : 0, passkey.aaguid, passkey.name, passkey.createdAt, passkey.lastUsedAt,
                    ])
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.conflict("this passkey is already registered")
        }
    }

    package func passkey(id: String) async throws -> PasskeyRecord? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM passkeys WHERE id = ?", arguments: [id]).flatMap(Self.passkey)
        }
    }

    package func passkeys(user: UserID) async throws -> [PasskeyRecord] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM passkeys WHERE user_id = ? ORDER BY created_at, id",
                arguments: [user.description]
            ).compactMap(Self.passkey)
        }
    }

    package func recordPasskeyUse(id: String, signCount: Int64, backedUp: Bool, now: Int64) async throws -> PasskeyUse {
        try await write { db in
            try db.execute(
                sql: """
                    UPDATE passkeys SET sign_count = ?, backed_up = ?, last_used_at = ?
                    WHERE id = ? AND (sign_count < ? OR (sign_count = 0 AND ? = 0))
                    """,
                arguments: [signCount, backedUp ? 1 : 0, now, id, signCount, signCount])
            if db.changesCount == 1 { return .recorded }
            let exists = try Bool.fetchOne(db, sql: "SELECT 1 FROM passkeys WHERE id = ?", arguments: [id]) ?? false
            return exists ? .counterNotIncreased : .unknown
        }
    }

    package func removePasskey(id: String, user: UserID, now: Int64) async throws -> PasskeyRemoval {
        try await write { db in
            let owner = user.description
            guard
                try Bool.fetchOne(
                    db, sql: "SELECT 1 FROM passkeys WHERE id = ? AND user_id = ?", arguments: [id, owner]) ?? false
            else { return .notFound }
            guard try Self.waysIn(db, user: owner) > 1 else { return .lastWayIn }
            try db.execute(sql: "DELETE FROM passkeys WHERE id = ? AND user_id = ?", arguments: [id, owner])
            return .removed
        }
    }

    /// How many ways in `user` has: linked identities, the password account, passkeys.
    static func waysIn(_ db: Database, user: String) throws -> Int {
        try Int.fetchOne(
            db,
            sql: """
                SELECT (SELECT COUNT(*) FROM identities WHERE user_id = ?1)
                    + (SELECT COUNT(*) FROM password_accounts WHERE user_id = ?1)
                    + (SELECT COUNT(*) FROM passkeys WHERE user_id = ?1)
                """,
            arguments: [user]) ?? 0
    }

    package func recoveryAddress(user: UserID) async throws -> RecoveryAddress? {
        try await read { db in
            try Row.fetchOne(
                db, sql: "SELECT email, verified_at FROM recovery_addresses WHERE user_id = ?",
                arguments: [user.description]
            ).map { RecoveryAddress(email: $0["email"], verifiedAt: $0["verified_at"]) }
        }
    }

    package func passkeyRecoveryUser(email: String) async throws -> UserRecord? {
        try await read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT u.id, u.email AS user_email, u.name, u.created_at FROM recovery_addresses r
                    JOIN users u ON u.id = r.user_id
                    WHERE r.email = ? AND u.disabled_at IS NULL
                        AND NOT EXISTS (SELECT 1 FROM password_accounts a WHERE a.user_id = r.user_id)
                        AND NOT EXISTS (SELECT 1 FROM identities i WHERE i.user_id = r.user_id)
                        AND EXISTS (SELECT 1 FROM passkeys p WHERE p.user_id = r.user_id)
                    ORDER BY r.verified_at DESC, r.user_id LIMIT 1
                    """,
                arguments: [email]
            ).flatMap(Self.user)
        }
    }

    package func recoverWithPasskey(linkHash: [UInt8], user: UserID, now: Int64) async throws -> Bool {
        try await write { db in
            let owner = user.description
            try db.execute(
                sql: """
                    UPDATE email_links SET used_at = ?
                    WHERE hash = ? AND user_id = ? AND purpose = ? AND used_at IS NULL AND expires_at > ?
                    """,
                arguments: [now, linkHash.hex, owner, EmailLinkPurpose.passkeyRecovery, now])
            guard db.changesCount == 1 else { return false }
            try db.execute(
                sql: "UPDATE email_links SET used_at = ? WHERE user_id = ? AND purpose = ? AND used_at IS NULL",
                arguments: [now, owner, EmailLinkPurpose.passkeyRecovery])
            try Self.endEverySession(db, user: owner, now: now)
            return true
        }
    }

    static func passkey(_ row: Row) -> PasskeyRecord? {
        guard let user = UserID(row["user_id"] as String), let key = [UInt8](hex: row["public_key"] as String)
        else { return nil }
        return PasskeyRecord(
            id: row["id"], userID: user, publicKey: key, algorithm: row["algorithm"], signCount: row["sign_count"],
            transports: PasskeyRecord.decode(row["transports"]), backupEligible: (row["backup_eligible"] as Int64) != 0,
            backedUp: (row["backed_up"] as Int64) != 0, aaguid: row["aaguid"], name: row["name"],
            createdAt: row["created_at"], lastUsedAt: row["last_used_at"])
    }
}
