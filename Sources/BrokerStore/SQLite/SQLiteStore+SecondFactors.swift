package import BrokerCore
import GRDB

/// Second factors, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {
    package func totpFactor(user: UserID) async throws -> TOTPFactorRecord? {
        try await read { db in
            try Row.fetchOne(
                db, sql: "SELECT sealed_key, created_at, last_step FROM totp_factors WHERE user_id = ?",
                arguments: [user.description]
            ).map { row in
                TOTPFactorRecord(
                    userID: user, sealedKey: row["sealed_key"], createdAt: row["created_at"],
                    lastStep: row["last_step"])
            }
        }
    }

    package func addTOTPFactor(_ factor: TOTPFactorRecord, recoveryCodes: [[UInt8]], now: Int64) async throws {
        do {
            try await write { db in
                try db.execute(
                    sql: "INSERT INTO totp_factors (user_id, sealed_key, created_at, last_step) VALUES (?, ?, ?, ?)",
                    arguments: [factor.userID.description, factor.sealedKey, factor.createdAt, factor.lastStep])
                try Self.replaceRecoveryCodes(db, user: factor.userID, hashes: recoveryCodes, now: now)
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.conflict("this account has a second factor already")
        }
    }

    package func removeTOTPFactor(user: UserID) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM totp_factors WHERE user_id = ?", arguments: [user.description])
            let removed = db.changesCount == 1
            try db.execute(sql: "DELETE FROM recovery_codes WHERE user_id = ?", arguments: [user.description])
            return removed
        }
    }

    package func removeTOTPFactor(linkHash: [UInt8], now: Int64) async throws -> UserID? {
        try await write { db in
            guard
                let owner = try String.fetchOne(
                    db,
                    sql: """
                        SELECT user_id FROM email_links
                        WHERE hash = ? AND purpose = ? AND used_at IS NULL AND expires_at > ?
                        """,
                    arguments: [linkHash.hex, EmailLinkPurpose.secondFactorRecovery, now]),
                let user = UserID(owner)
            else { return nil }
            try db.execute(
                sql: "UPDATE email_links SET used_at = ? WHERE user_id = ? AND purpose = ? AND used_at IS NULL",
                arguments: [now, owner, EmailLinkPurpose.secondFactorRecovery])
            try db.execute(sql: "DELETE FROM totp_factors WHERE user_id = ?", arguments: [owner])
            try db.execute(sql: "DELETE FROM recovery_codes WHERE user_id = ?", arguments: [owner])
            try Self.endEverySession(db, user: owner, now: now)
            return user
        }
    }

    package func recordTOTPStep(user: UserID, step: Int64) async throws -> Bool {
        try await write { db in
            try db.execute(
                sql: "UPDATE totp_factors SET last_step = ? WHERE user_id = ? AND last_step < ?",
                arguments: [step, user.description, step])
            return db.changesCount == 1
        }
    }

    package func replaceRecoveryCodes(user: UserID, hashes: [[UInt8]], now: Int64) async throws {
        try await write { db in try Self.replaceRecoveryCodes(db, user: user, hashes: hashes, now: now) }
    }

    private static func replaceRecoveryCodes(_ db: Database, user: UserID, hashes: [[UInt8]], now: Int64) throws {
        try db.execute(sql: "DELETE FROM recovery_codes WHERE user_id = ?", arguments: [user.description])
        for hash in hashes {
            try db.execute(
                sql: "INSERT INTO recovery_codes (hash, user_id, created_at) VALUES (?, ?, ?)",
                arguments: [hash.hex, user.description, now])
        }
    }

    package func spendRecoveryCode(user: UserID, hash: [UInt8], now: Int64) async throws -> Bool {
        try await write { db in
            try db.execute(
                sql: "UPDATE recovery_codes SET used_at = ? WHERE hash = ? AND user_id = ? AND used_at IS NULL",
                arguments: [now, hash.hex, user.description])
            return db.changesCount == 1
        }
    }

    package func recoveryCodesLeft(user: UserID) async throws -> Int {
        try await read { db in
            try Int.fetchOne(
                db, sql: "SELECT COUNT(*) FROM recovery_codes WHERE user_id = ? AND used_at IS NULL",
                arguments: [user.description]) ?? 0
        }
    }
}
