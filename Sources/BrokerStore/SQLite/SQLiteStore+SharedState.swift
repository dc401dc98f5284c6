import BrokerCore
import BrokerSystem
import GRDB

/// Shared state, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {
    package func signingKeys() async throws -> [StoredSigningKey] {
        // Read every second by each broker (a key rotated by another is picked up): a cached statement.
        try await read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: "SELECT kid, algorithm, sealed_key, created_at, retired_at FROM signing_keys "
                        + "ORDER BY created_at DESC, kid")
            ).map {
                StoredSigningKey(
                    kid: $0["kid"], algorithm: $0["algorithm"], sealedKey: $0["sealed_key"],
                    createdAt: $0["created_at"], retiredAt: $0["retired_at"])
            }
        }
    }

    package func addFirstSigningKey(_ key: StoredSigningKey) async throws -> Bool {
        try await write { db in
            guard try Int.fetchOne(db, sql: "SELECT 1 FROM signing_keys WHERE retired_at IS NULL") == nil else {
                return false
            }
            try Self.insert(key, db)
            return true
        }
    }

    package func rotateSigningKey(to key: StoredSigningKey, now: Int64, dropRetiredBefore: Int64) async throws {
        try await write { db in
            try db.execute(sql: "UPDATE signing_keys SET retired_at = ? WHERE retired_at IS NULL", arguments: [now])
            try db.execute(sql: "DELETE FROM signing_keys WHERE retired_at < ?", arguments: [dropRetiredBefore])
            try Self.insert(key, db)
        }
    }

    static func insert(_ key: StoredSigningKey, _ db: Database) throws {
        try db.execute(
            sql: "INSERT INTO signing_keys (kid, algorithm, sealed_key, created_at, retired_at) VALUES (?, ?, ?, ?, ?)",
            arguments: [key.kid, key.algorithm, key.sealedKey, key.createdAt, key.retiredAt]
        )
    }

    package func secretKey(name: String, orInsert sealed: String, now: Int64) async throws -> String {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO secret_keys (name, sealed_key, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                arguments: [name, sealed, now]
            )
            return try String.fetchOne(db, sql: "SELECT sealed_key FROM secret_keys WHERE name = ?", arguments: [name])
                ?? sealed
        }
    }

    package func replaceSecretKey(name: String, expected: String, with sealed: String) async throws -> Bool {
        try await write { db in
            try db.execute(
                sql: "UPDATE secret_keys SET sealed_key = ? WHERE name = ? AND sealed_key = ?",
                arguments: [sealed, name, expected])
            return db.changesCount == 1
        }
    }

    package func secretKey(name: String) async throws -> String? {
        try await read { db in
            try String.fetchOne(
                db.cachedStatement(sql: "SELECT sealed_key FROM secret_keys WHERE name = ?"), arguments: [name])
        }
    }

    package func rateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double, take: Bool) async throws
        -> Double?
    {
        // Looking needs no write transaction.
        guard take else {
            return try await read { db in
                bucket.step(stored: try Self.storedBucket(db, name, key), now: now, take: false).wait
            }
        }
        return try await write { db in
            let next = bucket.step(stored: try Self.storedBucket(db, name, key), now: now, take: true)
            if next.wait == nil {
                try db.execute(
                    sql: """
                        INSERT INTO rate_limits (name, key, tokens, updated_at, full_at) VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT(name, key) DO UPDATE SET tokens = excluded.tokens,
                            updated_at = excluded.updated_at, full_at = excluded.full_at
                        """,
                    arguments: [name, key, next.tokens, now, next.fullAt])
            }
            return next.wait
        }
    }

    package func refundRateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double) async throws {
        try await write { db in
            guard let next = bucket.refund(stored: try Self.storedBucket(db, name, key), now: now) else { return }
            try db.execute(
                sql: "UPDATE rate_limits SET tokens = ?, updated_at = ?, full_at = ? WHERE name = ? AND key = ?",
                arguments: [next.tokens, now, next.fullAt, name, key])
        }
    }

    static func storedBucket(_ db: Database, _ name: String, _ key: String) throws
        -> (tokens: Double, updated: Double)?
    {
        try Row.fetchOne(
            db, sql: "SELECT tokens, updated_at FROM rate_limits WHERE name = ? AND key = ?", arguments: [name, key]
        ).map { (tokens: $0["tokens"] as Double, updated: $0["updated_at"] as Double) }
    }

    package func updateThrottle<T: Sendable>(
        keys: [String], _ body: @escaping @Sendable (inout [String: ThrottleEntry]) -> T
    ) async throws -> T {
        try await write { db in
            var entries: [String: ThrottleEntry] = [:]
            for key in keys {
                if let row = try Row.fetchOne(
                    db,
                    sql: "SELECT failures, last_failure, blocked_until, in_flight, in_flight_since "
                        + "FROM login_throttle WHERE key = ?",
                    arguments: [key])
                {
                    entries[key] = ThrottleEntry(
                        failures: row["failures"], lastFailure: row["last_failure"],
                        blockedUntil: row["blocked_until"], inFlight: row["in_flight"],
                        inFlightSince: row["in_flight_since"])
                }
            }
            let result = body(&entries)
            for key in keys {
                if let entry = entries[key] {
                    try db.execute(
                        sql: """
                            INSERT INTO login_throttle
                                (key, failures, last_failure, blocked_until, in_flight, in_flight_since)
                            VALUES (?, ?, ?, ?, ?, ?)
                            ON CONFLICT(key) DO UPDATE SET failures = excluded.failures,
                                last_failure = excluded.last_failure, blocked_until = excluded.blocked_until,
                                in_flight = excluded.in_flight, in_flight_since = excluded.in_flight_since
                            """,
                        arguments: [
                            key, entry.failures, entry.lastFailure, entry.blockedUntil, entry.inFlight,
                            entry.inFlightSince,
                        ])
                } else {
                    try db.execute(sql: "DELETE FROM login_throttle WHERE key = ?", arguments: [key])
                }
            }
            return result
        }
    }

    static func client(_ row: Row) -> ClientRecord {
        var trust: TrustPolicy?
        if let issuer: String = row["trust_issuer"], let subject: String = row["trust_subject"] {
            trust = TrustPolicy(
                issuer: issuer,
                subjectPattern: subject,
                audience: row["trust_audience"] ?? "broker",
                maxAge: row["trust_max_age"] ?? 600
            )
        }
        let scopes: String = row["scopes"]
        return ClientRecord(
            name: row["name"],
            secretHash: (row["secret_hash"] as String?).flatMap { $0.isEmpty ? nil : $0 },
            scopes: scopes.split(separator: " ").map(String.init),
            trust: trust,
            createdAt: row["created_at"]
        )
    }

    static func insert(_ user: UserRecord, _ db: Database) throws {
        try db.execute(
            sql: "INSERT INTO users (id, provider, subject, email, name, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            arguments: [
                user.id.description, user.id.provider.rawValue, user.id.subject, user.email, user.name,
                user.createdAt,
            ]
        )
    }
}
