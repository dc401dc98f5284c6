import BrokerCore

/// A signing key as stored: its private half sealed under the master key (``sealedKey``, base64url of an
/// AES-256-GCM box bound to the kid), never in the clear.
package struct StoredSigningKey: Sendable, Hashable {
    package var kid: String
    /// `ES256`, `RS256` or `EdDSA`.
    package var algorithm: String
    package var sealedKey: String
    package var createdAt: Int64
    /// When a newer key took over; `nil` for the current key.
    package var retiredAt: Int64?

    package init(kid: String, algorithm: String, sealedKey: String, createdAt: Int64, retiredAt: Int64?) {
        self.kid = kid
        self.algorithm = algorithm
        self.sealedKey = sealedKey
        self.createdAt = createdAt
        self.retiredAt = retiredAt
    }
}

/// One key of the login throttle (an account, an address, or both): failures in a row and the block they
/// started, and the attempts admitted but not yet settled.
package struct ThrottleEntry: Sendable, Hashable {
    package var failures = 0
    package var lastFailure = 0.0
    package var blockedUntil = 0.0
    package var inFlight = 0
    /// When ``inFlight`` last went up: reservations older than a minute are from a broker that died mid-attempt.
    package var inFlightSince = 0.0

    package init(
        failures: Int = 0, lastFailure: Double = 0, blockedUntil: Double = 0, inFlight: Int = 0,
        inFlightSince: Double = 0
    ) {
        self.failures = failures
        self.lastFailure = lastFailure
        self.blockedUntil = blockedUntil
        self.inFlight = inFlight
        self.inFlightSince = inFlightSince
    }
}

/// What every broker on one database must agree on: the signing keys, the secret keys (client-secret HMAC
/// key, sign-in sealing key), sealed under the master key, and the login throttle's counters.
package protocol SharedStateStore: Sendable {
    /// Every signing key, current and retired, newest first.
    func signingKeys() async throws -> [StoredSigningKey]

    /// Stores `key` as the first current key unless there is a current key already (ten brokers starting on
    /// an empty database agree on one key). Returns whether it was stored.
    func addFirstSigningKey(_ key: StoredSigningKey) async throws -> Bool

    /// In one transaction: retires the current key at `now`, deletes keys retired before `dropRetiredBefore`,
    /// and makes `key` current.
    func rotateSigningKey(to key: StoredSigningKey, now: Int64, dropRetiredBefore: Int64) async throws

    /// The sealed secret key called `name`, storing `sealed` first when there is none (the first writer wins,
    /// and every broker gets the same key).
    func secretKey(name: String, orInsert sealed: String, now: Int64) async throws -> String

    /// The sealed secret key called `name`, if any.
    func secretKey(name: String) async throws -> String?

    /// Replaces the sealed secret `name` if it is still `expected` (compare-and-set: of two rotations at once
    /// one wins); whether it was replaced.
    func replaceSecretKey(name: String, expected: String, with sealed: String) async throws -> Bool

    /// Reads the throttle entries of `keys`, lets `body` change them, and writes them back, in one
    /// transaction that holds the rows against other brokers (a missing entry is absent from the dictionary;
    /// one removed by `body` is deleted).
    func updateThrottle<T: Sendable>(
        keys: [String], _ body: @escaping @Sendable (inout [String: ThrottleEntry]) -> T
    ) async throws -> T
}
