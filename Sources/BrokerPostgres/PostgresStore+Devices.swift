package import BrokerCore
package import BrokerStore
import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// Device authorizations, on PostgreSQL: one facet of the store, in the same order in both dialects.
extension PostgresStore {
    package func createDeviceAuthorization(_ record: DeviceAuthorization, maxPending: Int, now: Int64) async throws
        -> Bool
    {
        let logger = logger
        return try await transaction("device authorization") { connection in
            // One creation at a time, so that the bound holds across brokers.
            try await connection.query(
                "SELECT pg_advisory_xact_lock(\(Self.deviceLock))", logger: logger
            ).drain()
            let pending =
                try await Self.first(
                    Int64.self,
                    """
                    SELECT COUNT(*) FROM device_codes WHERE status = \(DeviceStatus.pending) AND expires_at > \(now)
                    """, connection, logger) ?? 0
            guard pending < maxPending else { return false }
            try await connection.query(
                """
                INSERT INTO device_codes (hash, user_code, client_id, provider, client_address, created_at,
                expires_at, poll_interval, status, link_user, link_session)
                VALUES (\(record.deviceCodeHash.hex), \(record.userCode), \(record.clientID),
                        \(record.provider?.rawValue), \(record.clientAddress), \(record.createdAt),
                        \(record.expiresAt), \(record.interval), \(DeviceStatus.pending),
                        \(record.linkUser?.description), \(record.linkSession))
                """, logger: logger
            ).drain()
            return true
        }
    }

    static let deviceLock: Int64 = 0x6272_6f6b_6465  // "brokde"

    package func pendingDeviceAuthorization(userCode: String, now: Int64) async throws -> DeviceAuthorization? {
        let client = client
        return try await run("device authorization") {
            let rows = try await client.query(
                """
                SELECT hash, user_code, client_id, provider, client_address, created_at, expires_at, poll_interval,
                link_user, link_session FROM device_codes WHERE user_code = \(userCode)
                AND status = \(DeviceStatus.pending) AND expires_at > \(now)
                """
            ).decode((String, String, String, String?, String?, Int64, Int64, Int64, String?, String?).self)
            for try await (hash, code, clientID, provider, address, created, expires, interval, link, linkSession)
                in rows
            {
                guard let bytes = [UInt8](hex: hash) else { return nil }
                return DeviceAuthorization(
                    deviceCodeHash: bytes, userCode: code, clientID: clientID,
                    provider: provider.flatMap(ProviderID.init(rawValue:)), clientAddress: address, createdAt: created,
                    expiresAt: expires, interval: interval, linkUser: link.flatMap(UserID.init),
                    linkSession: linkSession)
            }
            return nil
        }
    }

    package func decideDeviceAuthorization(userCode: String, user: UserID?, signedInWith: ProviderID?, now: Int64)
        async throws -> Bool
    {
        try await returnsRow(
            "device decision",
            """
            UPDATE device_codes SET status = \(user == nil ? DeviceStatus.denied : DeviceStatus.approved),
            user_id = \(user?.description), signed_in_with = \(user == nil ? nil : signedInWith?.rawValue)
            WHERE user_code = \(userCode) AND status = \(DeviceStatus.pending) AND expires_at > \(now) RETURNING 1
            """)
    }

    package func pollDeviceAuthorization(hash: [UInt8], now: Int64) async throws -> DevicePoll {
        let logger = logger
        return try await transaction("device poll") { connection in
            let rows = try await connection.query(
                """
                SELECT expires_at, poll_interval, last_polled_at, status, user_id, signed_in_with FROM device_codes
                WHERE hash = \(hash.hex) FOR UPDATE
                """, logger: logger
            ).decode((Int64, Int64, Int64?, String, String?, String?).self)
            var found: (Int64, Int64, Int64?, String, String?, String?)?
            for try await row in rows { found = row }
            guard let (expires, interval, last, status, user, signedInWith) = found else { return .unknown }
            switch DevicePollRule.decide(
                status: status, expiresAt: expires, interval: interval, lastPolledAt: last, now: now)
            {
            case .spent: return .spent
            case .expired: return .expired
            case .slowDown(let next):
                try await connection.query(
                    """
                    UPDATE device_codes SET poll_interval = \(next), last_polled_at = \(now)
                    WHERE hash = \(hash.hex)
                    """, logger: logger
                ).drain()
                return .slowDown(interval: next)
            case .approve:
                guard let user = user.flatMap(UserID.init) else { return .denied }
                try await connection.query(
                    """
                    UPDATE device_codes SET status = \(DeviceStatus.spent), last_polled_at = \(now)
                    WHERE hash = \(hash.hex)
                    """, logger: logger
                ).drain()
                return .approved(user, signedInWith: signedInWith.flatMap(ProviderID.init(rawValue:)))
            case .denied:
                return .denied
            case .pending:
                try await connection.query(
                    "UPDATE device_codes SET last_polled_at = \(now) WHERE hash = \(hash.hex)", logger: logger
                ).drain()
                return .pending
            }
        }
    }
}
