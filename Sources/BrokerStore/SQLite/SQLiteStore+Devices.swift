package import BrokerCore
import BrokerSystem
import GRDB

/// Device authorizations, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {
    package func createDeviceAuthorization(_ record: DeviceAuthorization, maxPending: Int, now: Int64) async throws
        -> Bool
    {
        do {
            return try await pool.write { db in
                let pending =
                    try Int.fetchOne(
                        db, sql: "SELECT COUNT(*) FROM device_codes WHERE status = ? AND expires_at > ?",
                        arguments: [DeviceStatus.pending, now]) ?? 0
                guard pending < maxPending else { return false }
                try db.execute(
                    sql: """
                        INSERT INTO device_codes (hash, user_code, client_id, provider, client_address, created_at,
                        expires_at, poll_interval, status, link_user, link_session)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        record.deviceCodeHash.hex, record.userCode, record.clientID, record.provider?.rawValue,
                        record.clientAddress, record.createdAt, record.expiresAt, record.interval, DeviceStatus.pending,
                        record.linkUser?.description, record.linkSession,
                    ])
                return true
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.conflict("the user code is in use")
        }
    }

    package func pendingDeviceAuthorization(userCode: String, now: Int64) async throws -> DeviceAuthorization? {
        try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT hash, user_code, client_id, provider, client_address, created_at, expires_at, poll_interval,
                    link_user, link_session FROM device_codes WHERE user_code = ? AND status = ? AND expires_at > ?
                    """,
                arguments: [userCode, DeviceStatus.pending, now]
            ).flatMap { row in
                guard let hash = Self.bytes(hex: row["hash"]) else { return nil }
                return DeviceAuthorization(
                    deviceCodeHash: hash, userCode: row["user_code"], clientID: row["client_id"],
                    provider: (row["provider"] as String?).flatMap(ProviderID.init(rawValue:)),
                    clientAddress: row["client_address"], createdAt: row["created_at"], expiresAt: row["expires_at"],
                    interval: row["poll_interval"], linkUser: (row["link_user"] as String?).flatMap(UserID.init),
                    linkSession: row["link_session"])
            }
        }
    }

    package func decideDeviceAuthorization(userCode: String, user: UserID?, signedInWith: ProviderID?, now: Int64)
        async throws -> Bool
    {
        try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE device_codes SET status = ?, user_id = ?, signed_in_with = ?
                    WHERE user_code = ? AND status = ? AND expires_at > ?
                    """,
                arguments: [
                    user == nil ? DeviceStatus.denied : DeviceStatus.approved, user?.description,
                    user == nil ? nil : signedInWith?.rawValue, userCode, DeviceStatus.pending, now,
                ])
            return db.changesCount == 1
        }
    }

    package func pollDeviceAuthorization(hash: [UInt8], now: Int64) async throws -> DevicePoll {
        try await pool.write { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT expires_at, poll_interval, last_polled_at, status, user_id, signed_in_with
                        FROM device_codes WHERE hash = ?
                        """,
                    arguments: [hash.hex])
            else { return .unknown }
            let status: String = row["status"]
            if status == DeviceStatus.spent { return .spent }
            if now >= (row["expires_at"] as Int64) { return .expired }
            let interval: Int64 = row["poll_interval"]
            if let last = row["last_polled_at"] as Int64?, now - last < interval - 1 {
                try db.execute(
                    sql: "UPDATE device_codes SET poll_interval = ?, last_polled_at = ? WHERE hash = ?",
                    arguments: [interval + 5, now, hash.hex])
                return .slowDown(interval: interval + 5)
            }
            switch status {
            case DeviceStatus.approved:
                guard let user = (row["user_id"] as String?).flatMap(UserID.init) else { return .denied }
                try db.execute(
                    sql: "UPDATE device_codes SET status = ?, last_polled_at = ? WHERE hash = ?",
                    arguments: [DeviceStatus.spent, now, hash.hex])
                return .approved(
                    user, signedInWith: (row["signed_in_with"] as String?).flatMap(ProviderID.init(rawValue:)))
            case DeviceStatus.denied:
                return .denied
            default:
                try db.execute(
                    sql: "UPDATE device_codes SET last_polled_at = ? WHERE hash = ?", arguments: [now, hash.hex])
                return .pending
            }
        }
    }

    /// Bytes from lowercase hex (the store's spelling of hashes).
    static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16) else {
                return nil
            }
            bytes.append(byte)
        }
        return bytes
    }
}
