package import BrokerCore
package import BrokerStore
import PostgresNIO

/// Second factors, on PostgreSQL: one facet of the store, in the same order in both dialects.
extension PostgresStore {
    package func totpFactor(user: UserID) async throws -> TOTPFactorRecord? {
        let client = client
        return try await run("second factor read") {
            let rows = try await client.query(
                "SELECT sealed_key, created_at, last_step FROM totp_factors WHERE user_id = \(user.description)"
            ).decode((String, Int64, Int64).self)
            for try await (sealed, created, last) in rows {
                return TOTPFactorRecord(userID: user, sealedKey: sealed, createdAt: created, lastStep: last)
            }
            return nil
        }
    }

    package func addTOTPFactor(_ factor: TOTPFactorRecord, recoveryCodes: [[UInt8]], now: Int64) async throws {
        let logger = logger
        do {
            try await transaction("second factor creation") { connection in
                try await connection.query(
                    """
                    INSERT INTO totp_factors (user_id, sealed_key, created_at, last_step)
                    VALUES (\(factor.userID.description), \(factor.sealedKey), \(factor.createdAt), \(factor.lastStep))
                    """, logger: logger
                ).drain()
                try await Self.replaceRecoveryCodes(
                    connection, user: factor.userID, hashes: recoveryCodes, now: now, logger: logger)
            }
        } catch let error as StoreError where error.code == .conflict {
            throw StoreError.conflict("this account has a second factor already")
        }
    }

    package func removeTOTPFactor(user: UserID) async throws -> Bool {
        let logger = logger
        return try await transaction("second factor removal") { connection in
            var removed = false
            for try await _ in try await connection.query(
                "DELETE FROM totp_factors WHERE user_id = \(user.description) RETURNING 1", logger: logger
            ).decode(Int.self) { removed = true }
            try await connection.query(
                "DELETE FROM recovery_codes WHERE user_id = \(user.description)", logger: logger
            ).drain()
            return removed
        }
    }

    package func removeTOTPFactor(linkHash: [UInt8], now: Int64) async throws -> UserID? {
        let logger = logger
        return try await transaction("second factor recovery") { connection in
            guard
                let owner = try await Self.spendLink(
                    linkHash, purpose: EmailLinkPurpose.secondFactorRecovery, now: now, connection, logger),
                let user = UserID(owner)
            else { return nil }
            try await connection.query(
                """
                UPDATE email_links SET used_at = \(now)
                WHERE user_id = \(owner) AND purpose = \(EmailLinkPurpose.secondFactorRecovery) AND used_at IS NULL
                """, logger: logger
            ).drain()
            try await connection.query("DELETE FROM totp_factors WHERE user_id = \(owner)", logger: logger).drain()
            try await connection.query("DELETE FROM recovery_codes WHERE user_id = \(owner)", logger: logger).drain()
            try await Self.endEverySession(of: owner, now: now, connection, logger)
            return user
        }
    }

    package func recordTOTPStep(user: UserID, step: Int64) async throws -> Bool {
        try await returnsRow(
            "second factor use",
            """
            UPDATE totp_factors SET last_step = \(step)
            WHERE user_id = \(user.description) AND last_step < \(step) RETURNING 1
            """)
    }

    package func replaceRecoveryCodes(user: UserID, hashes: [[UInt8]], now: Int64) async throws {
        let logger = logger
        try await transaction("recovery codes") { connection in
            try await Self.replaceRecoveryCodes(connection, user: user, hashes: hashes, now: now, logger: logger)
        }
    }

    private static func replaceRecoveryCodes(
        _ connection: PostgresConnection, user: UserID, hashes: [[UInt8]], now: Int64, logger: Logger
    ) async throws {
        try await connection.query(
            "DELETE FROM recovery_codes WHERE user_id = \(user.description)", logger: logger
        ).drain()
        for hash in hashes {
            try await connection.query(
                "INSERT INTO recovery_codes (hash, user_id, created_at) VALUES (\(hash.hex), \(user.description), \(now))",
                logger: logger
            ).drain()
        }
    }

    package func spendRecoveryCode(user: UserID, hash: [UInt8], now: Int64) async throws -> Bool {
        try await returnsRow(
            "recovery code use",
            """
            UPDATE recovery_codes SET used_at = \(now)
            WHERE hash = \(hash.hex) AND user_id = \(user.description) AND used_at IS NULL RETURNING 1
            """)
    }

    package func recoveryCodesLeft(user: UserID) async throws -> Int {
        let client = client
        return try await run("recovery codes left") {
            let rows = try await client.query(
                "SELECT COUNT(*) FROM recovery_codes WHERE user_id = \(user.description) AND used_at IS NULL"
            ).decode(Int64.self)
            for try await count in rows { return Int(count) }
            return 0
        }
    }
}
