package import BrokerCore
import BrokerStore
import Synchronization

/// Token buckets per key (a client address, a sign-in's marker) in this broker's memory, on the injected clock:
/// `capacity` requests at once, refilled at `capacity / period` per second (``TokenBucket``'s arithmetic, as in
/// the store). Bounded: when the table is full, full buckets (which hold no information) are dropped first,
/// then the oldest.
package final class RateLimiter: Sendable {
    private typealias Stored = (tokens: Double, updated: Double)

    let bucket: TokenBucket
    private let clock: any WallClock
    private let maxKeys: Int
    private let buckets = Mutex([String: Stored]())

    /// - Parameters:
    ///   - capacity: requests a key may make at once.
    ///   - period: seconds in which a spent bucket fills up again.
    package init(capacity: Int, per period: Double, clock: any WallClock, maxKeys: Int = 100_000) {
        bucket = TokenBucket(capacity: capacity, period: period)
        self.clock = clock
        self.maxKeys = maxKeys
    }

    /// Takes one token for `key`: `nil` when the request may go on, else the seconds until it may.
    package func take(_ key: String) -> Double? {
        let now = clock.now()
        return buckets.withLock { buckets in
            if buckets.count >= maxKeys, buckets[key] == nil { evict(&buckets, now: now, keep: maxKeys / 2) }
            let next = bucket.step(stored: buckets[key], now: now, take: true)
            buckets[key] = (next.tokens, now)
            return next.wait
        }
    }

    /// Takes one token for `key` (nothing when `key` is `nil`), or counts the refusal under `limit` and throws
    /// 429 with `detail` and the seconds to wait.
    func admit(_ key: String?, metrics: BrokerMetrics, limit: String, _ detail: String) throws {
        guard let key, let wait = take(key) else { return }
        throw metrics.throttle(limit, wait: wait, detail)
    }

    /// Returns a token taken for a request that was not served after all (the server was busy).
    package func giveBack(_ key: String) {
        buckets.withLock { buckets in
            guard let stored = buckets[key] else { return }
            buckets[key] = (min(bucket.capacity, stored.tokens + 1), stored.updated)
        }
    }

    /// Drops full buckets (they hold no information), then, if still more than `keep`, the oldest.
    private func evict(_ buckets: inout [String: Stored], now: Double, keep: Int) {
        buckets = buckets.filter { bucket.step(stored: $0.value, now: now, take: false).tokens < bucket.capacity }
        if buckets.count > keep {
            let newest = buckets.sorted { $0.value.updated > $1.value.updated }.prefix(keep)
            buckets = Dictionary(uniqueKeysWithValues: newest.map { ($0.key, $0.value) })
        }
    }
}

/// Token buckets in the store (``RateLimitStore``): the same limit for every broker on one database, and kept
/// across restarts. For the limits that stop guessing and mail abuse (device codes, resets, verification
/// mail), which a fleet of brokers must not multiply; the high-rate guard on sign-in starts stays in memory.
final class SharedRateLimiter: Sendable {
    let name: String
    let bucket: TokenBucket
    private let store: any Store
    private let clock: any WallClock

    /// - Parameters:
    ///   - name: the limit's name in the store (and in `broker_throttled_total{limit}` via ``admit``).
    ///   - capacity: requests a key may make at once.
    ///   - period: seconds in which a spent bucket fills up again.
    init(_ name: String, capacity: Int, per period: Double, store: any Store, clock: any WallClock) {
        self.name = name
        bucket = TokenBucket(capacity: capacity, period: period)
        self.store = store
        self.clock = clock
    }

    /// Takes one token for `key`: `nil` when the request may go on, else the seconds until it may.
    func take(_ key: String) async throws -> Double? {
        try await store.rateLimit(name, key: key, bucket: bucket, now: clock.now(), take: true)
    }

    /// Gives back a token taken for `key` that turned out not to count.
    func giveBack(_ key: String) async throws {
        try await store.refundRateLimit(name, key: key, bucket: bucket, now: clock.now())
    }

    /// Whether `key` has no token left, without taking one: `nil` when it has, else the seconds until it will.
    func peek(_ key: String) async throws -> Double? {
        try await store.rateLimit(name, key: key, bucket: bucket, now: clock.now(), take: false)
    }

    /// Takes one token for `key` (nothing when `key` is `nil`), or counts the refusal under `limit` and throws
    /// 429 with `detail` and the seconds to wait.
    func admit(_ key: String?, metrics: BrokerMetrics, limit: String, _ detail: String) async throws {
        guard let key, let wait = try await take(key) else { return }
        throw metrics.throttle(limit, wait: wait, detail)
    }
}

extension BrokerMetrics {
    /// A request refused by a rate limit: counted under `limit`, answered 429 with the wait (whole seconds,
    /// rounded up) in `Retry-After`.
    func throttle(_ limit: String, wait: Double, _ detail: String) -> APIError {
        throttled(limit)
        return APIError.tooManyRequests(retryAfter: Int64(wait.rounded(.up)), detail)
    }
}
