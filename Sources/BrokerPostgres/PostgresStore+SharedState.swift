import BrokerCore
package import BrokerStore
import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// Shared state, on PostgreSQL: one facet of the store, in the same order in both dialects.
extension PostgresStore {
    package func signingKeys() async throws -> [StoredSigningKey] {
        let client = client
        return try await run("signing keys") {
            var keys: [StoredSigningKey] = []
            let rows = try await client.query(
                "SELECT kid, algorithm, sealed_key, created_at, retired_at FROM signing_keys ORDER BY created_at DESC, kid"
            ).decode((String, String, String, Int64, Int64?).self)
            for try await (kid, algorithm, sealed, created, retired) in rows {
                keys.append(
                    StoredSigningKey(
                        kid: kid, algorithm: algorithm, sealedKey: sealed, createdAt: created, retiredAt: retired))
            }
            return keys
        }
    }

    package func addFirstSigningKey(_ key: StoredSigningKey) async throws -> Bool {
        // The partial unique index on current keys decides between brokers starting at once.
        try await returnsRow(
            "signing key",
            """
            INSERT INTO signing_keys (kid, algorithm, sealed_key, created_at, retired_at)
            VALUES (\(key.kid), \(key.algorithm), \(key.sealedKey), \(key.createdAt), \(key.retiredAt))
            ON CONFLICT DO NOTHING RETURNING 1
            """)
    }

    package func rotateSigningKey(to key: StoredSigningKey, now: Int64, dropRetiredBefore: Int64) async throws {
        let logger = logger
        try await transaction("key rotation") { connection in
            try await connection.query("LOCK TABLE signing_keys IN SHARE ROW EXCLUSIVE MODE", logger: logger)
                .drain()
            try await connection.query(
                "UPDATE signing_keys SET retired_at = \(now) WHERE retired_at IS NULL", logger: logger
            ).drain()
            try await connection.query(
                "DELETE FROM signing_keys WHERE retired_at < \(dropRetiredBefore)", logger: logger
            ).drain()
            try await connection.query(
                """
                INSERT INTO signing_keys (kid, algorithm, sealed_key, created_at, retired_at)
                VALUES (\(key.kid), \(key.algorithm), \(key.sealedKey), \(key.createdAt), \(key.retiredAt))
                """, logger: logger
            ).drain()
        }
    }

    package func secretKey(name: String, orInsert sealed: String, now: Int64) async throws -> String {
        try await query(
            "secret key",
            """
            INSERT INTO secret_keys (name, sealed_key, created_at) VALUES (\(name), \(sealed), \(now))
            ON CONFLICT (name) DO NOTHING
            """)
        // The first writer's key, whoever that was.
        return try await secretKey(name: name) ?? sealed
    }

    package func replaceSecretKey(name: String, expected: String, with sealed: String) async throws -> Bool {
        let client = client
        return try await run("secret key rotation") {
            for try await _ in try await client.query(
                """
                UPDATE secret_keys SET sealed_key = \(sealed) WHERE name = \(name) AND sealed_key = \(expected)
                RETURNING 1
                """
            ).decode(Int.self) {
                return true
            }
            return false
        }
    }

    package func secretKey(name: String) async throws -> String? {
        let client = client
        return try await run("secret key") {
            for try await stored in try await client.query(
                "SELECT sealed_key FROM secret_keys WHERE name = \(name)"
            ).decode(String.self) {
                return stored
            }
            return nil
        }
    }

    package func rateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double, take: Bool) async throws
        -> Double?
    {
        let logger = logger
        guard take else {
            let client = client
            return try await run("rate limit") {
                let rows = try await client.query(
                    "SELECT tokens, updated_at FROM rate_limits WHERE name = \(name) AND key = \(key)")
                return bucket.step(stored: try await Self.storedBucket(rows), now: now, take: false).wait
            }
        }
        return try await transaction("rate limit") { connection in
            // The row is created full if missing, then locked: two brokers taking at once queue on it.
            try await connection.query(
                """
                INSERT INTO rate_limits (name, key, tokens, updated_at, full_at)
                VALUES (\(name), \(key), \(bucket.capacity), \(now), \(now)) ON CONFLICT (name, key) DO NOTHING
                """, logger: logger
            ).drain()
            let rows = try await connection.query(
                "SELECT tokens, updated_at FROM rate_limits WHERE name = \(name) AND key = \(key) FOR UPDATE",
                logger: logger)
            let next = bucket.step(stored: try await Self.storedBucket(rows), now: now, take: true)
            if next.wait == nil {
                try await connection.query(
                    """
                    UPDATE rate_limits SET tokens = \(next.tokens), updated_at = \(now), full_at = \(next.fullAt)
                    WHERE name = \(name) AND key = \(key)
                    """, logger: logger
                ).drain()
            }
            return next.wait
        }
    }

    package func refundRateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double) async throws {
        let logger = logger
        try await transaction("rate limit refund") { connection in
            let rows = try await connection.query(
                "SELECT tokens, updated_at FROM rate_limits WHERE name = \(name) AND key = \(key) FOR UPDATE",
                logger: logger)
            guard let next = bucket.refund(stored: try await Self.storedBucket(rows), now: now) else { return }
            try await connection.query(
                """
                UPDATE rate_limits SET tokens = \(next.tokens), updated_at = \(now), full_at = \(next.fullAt)
                WHERE name = \(name) AND key = \(key)
                """, logger: logger
            ).drain()
        }
    }

    /// The one bucket row `SELECT tokens, updated_at …` found, if any.
    static func storedBucket(_ rows: PostgresRowSequence) async throws -> (tokens: Double, updated: Double)? {
        var stored: (tokens: Double, updated: Double)?
        for try await (tokens, updated) in rows.decode((Double, Double).self) { stored = (tokens, updated) }
        return stored
    }

    package func updateThrottle<T: Sendable>(
        keys: [String], _ body: @escaping @Sendable (inout [String: ThrottleEntry]) -> T
    ) async throws -> T {
        let logger = logger
        let sorted = Array(Set(keys)).sorted()
        return try await transaction("login throttle") { connection in
            // Rows are created (empty) and then locked in key order, so brokers never deadlock on them.
            for key in sorted {
                try await connection.query(
                    """
                    INSERT INTO login_throttle (key, failures, last_failure, blocked_until, in_flight, in_flight_since)
                    VALUES (\(key), 0, 0, 0, 0, 0) ON CONFLICT (key) DO NOTHING
                    """, logger: logger
                ).drain()
            }
            var entries: [String: ThrottleEntry] = [:]
            let rows = try await connection.query(
                """
                SELECT key, failures, last_failure, blocked_until, in_flight, in_flight_since FROM login_throttle
                WHERE key = ANY(\(sorted)) ORDER BY key FOR UPDATE
                """, logger: logger
            ).decode((String, Int, Double, Double, Int, Double).self)
            for try await (key, failures, last, blocked, inFlight, since) in rows {
                let entry = ThrottleEntry(
                    failures: failures, lastFailure: last, blockedUntil: blocked, inFlight: inFlight,
                    inFlightSince: since)
                if entry != ThrottleEntry() { entries[key] = entry }
            }
            let result = body(&entries)
            for key in sorted {
                if let entry = entries[key], entry != ThrottleEntry() {
                    try await connection.query(
                        """
                        UPDATE login_throttle SET failures = \(entry.failures), last_failure = \(entry.lastFailure),
                            blocked_until = \(entry.blockedUntil), in_flight = \(entry.inFlight),
                            in_flight_since = \(entry.inFlightSince)
                        WHERE key = \(key)
                        """, logger: logger
                    ).drain()
                } else {
                    try await connection.query("DELETE FROM login_throttle WHERE key = \(key)", logger: logger)
                        .drain()
                }
            }
            return result
        }
    }
}
