import BrokerCore

/// A token bucket: at most `capacity` tokens, refilled at `capacity / period` per second.
package struct TokenBucket: Sendable, Hashable {
    package var capacity: Double
    package var period: Double

    package init(capacity: Int, period: Double) {
        self.capacity = Double(capacity)
        self.period = period
    }

    var rate: Double { capacity / period }

    /// The bucket at `now` from what was stored (`nil`: a full bucket), with one token taken when `take` and
    /// one is there: its new level, when it will be full again, and `nil` or the seconds until a token is back.
    /// The stores and the server's in-memory limiter share this arithmetic.
    package func step(stored: (tokens: Double, updated: Double)?, now: Double, take: Bool)
        -> (tokens: Double, fullAt: Double, wait: Double?)
    {
        var tokens = capacity
        if let stored { tokens = min(capacity, stored.tokens + max(0, now - stored.updated) * rate) }
        guard tokens >= 1 else { return (tokens, now + (capacity - tokens) / rate, (1 - tokens) / rate) }
        if take { tokens -= 1 }
        return (tokens, now + (capacity - tokens) / rate, nil)
    }

    /// The bucket at `now` with one token given back (never above capacity): a reservation that turned out not
    /// to count. `nil` when nothing was stored (the bucket is full).
    package func refund(stored: (tokens: Double, updated: Double)?, now: Double) -> (tokens: Double, fullAt: Double)? {
        guard let stored else { return nil }
        let tokens = min(capacity, stored.tokens + max(0, now - stored.updated) * rate + 1)
        return (tokens, now + (capacity - tokens) / rate)
    }
}

/// Rate limits in the store (schema v11), so that every broker on one database counts against the same
/// buckets: a guesser or a mail bomber spread over brokers is slowed as if there were one.
package protocol RateLimitStore: Sendable {
    /// Takes one token from the bucket `key` of the limit `name` at `now` (seconds), in one transaction that
    /// holds the bucket against other brokers; with `take: false` only looks. `nil` when a token was there
    /// (and is now taken), else the seconds until one will be.
    func rateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double, take: Bool) async throws
        -> Double?

    /// Gives one token back to the bucket `key` of the limit `name` (a reservation taken first that turned out
    /// not to count), in one transaction.
    func refundRateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double) async throws
}
