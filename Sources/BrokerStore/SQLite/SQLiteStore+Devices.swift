package import BrokerCore
import BrokerSystem
import GRDB

/// Device authorizations, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {
    package func createDeviceAuthorization(_ record: DeviceAuthorization, maxPending: Int, now: Int64) async throws
        -> Bool
    {
        do {
            return try await write { db in
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
        try await read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT hash, user_code, client_id, provider, client_address, created_at, expires_at, poll_interval,
                    link_user, link_session FROM device_codes WHERE user_code = ? AND status = ? AND expires_at > ?
                    """,
                arguments: [userCode, DeviceStatus.pending, now]
            ).flatMap { row in
                guard let hash = [UInt8](hex: row["hash"] as String) else { return nil }
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
        try await write { db in
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
        try await write { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT expires_at, poll_interval, last_polled_at, status, user_id, signed_in_with
                        FROM device_codes WHERE hash = ?
                        """,
                    arguments: [hash.hex])
            else { return .unknown }
            switch DevicePollRule.decide(
                status: row["status"], expiresAt: row["expires_at"], interval: row["poll_interval"],
                lastPolledAt: row["last_polled_at"], now: now)
            {
            case .spent: return .spent
            case .expired: return .expired
            case .slowDown(let interval):
                try db.execute(
                    sql: "UPDATE device_codes SET poll_interval = ?, last_polled_at = ? WHERE hash = ?",
                    arguments: [interval, now, hash.hex])
                return .slowDown(interval: interval)
            case .approve:
                guard let user = (row["user_id"] as String?).flatMap(UserID.init) else { return .denied }
                try db.execute(
                    sql: "UPDATE device_codes SET status = ?, last_polled_at = ? WHERE hash = ?",
                    arguments: [DeviceStatus.spent, now, hash.hex])
                return .approved(
                    user, signedInWith: (row["signed_in_with"] as String?).flatMap(ProviderID.init(rawValue:)))
            case .denied:
                return .denied
            case .pending:
                try db.execute(
                    sql: "UPDATE device_codes SET last_polled_at = ? WHERE hash = ?", arguments: [now, hash.hex])
                return .pending
            }
        }
    }
}
