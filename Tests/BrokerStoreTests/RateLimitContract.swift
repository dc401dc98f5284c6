import BrokerCore
import BrokerStore
import BrokerTesting
import Testing

/// The ``RateLimitStore`` half of the contract (schema v11): token buckets every broker on one database shares.
@Suite("Store contract: shared rate limits")
struct RateLimitContract {
    /// Three at once, one more every 20 s.
    static let bucket = TokenBucket(capacity: 3, period: 60)
    static let now = Double(Make.now)

    static func take(
        _ store: any Store, _ key: String = "192.0.2.7", name: String = "device_user_code", at time: Double
    )
        async throws -> Double?
    {
        try await store.rateLimit(name, key: key, bucket: bucket, now: time, take: true)
    }

    @Test(arguments: StoreUnderTest.available)
    func aBucketEmptiesRefillsAndBelongsToOneNameAndKey(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        for _ in 0..<3 { #expect(try await Self.take(store, at: Self.now) == nil) }
        #expect(try await Self.take(store, at: Self.now) == 20, "empty: a token is back in 20 s")
        #expect(
            try await store.rateLimit(
                "device_user_code", key: "192.0.2.7", bucket: Self.bucket, now: Self.now, take: false)
                == 20, "looking")
        #expect(try await Self.take(store, "192.0.2.8", at: Self.now) == nil, "another key has its own bucket")
        #expect(try await Self.take(store, name: "password_reset_email", at: Self.now) == nil, "and another limit")
        let almost = try #require(try await Self.take(store, at: Self.now + 19.5))
        #expect(abs(almost - 0.5) < 0.001, "refused takes cost nothing: \(almost)")
        #expect(try await Self.take(store, at: Self.now + 20) == nil, "refilled at capacity / period")
        #expect(try await Self.take(store, at: Self.now + 20) == 20)
        #expect(
            try await store.rateLimit(
                "device_user_code", key: "192.0.2.9", bucket: Self.bucket, now: Self.now, take: false)
                == nil, "looking at a bucket nobody used")
        for _ in 0..<3 { #expect(try await Self.take(store, at: Self.now + 1000) == nil, "full again after a while") }
    }

    /// A reservation given back (RT2-3: a right user code) is a token in the bucket again, never more than it
    /// holds, and only in its own bucket.
    @Test(arguments: StoreUnderTest.available)
    func aRefundGivesOneTokenBackAndNeverOverfills(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        for _ in 0..<3 { #expect(try await Self.take(store, at: Self.now) == nil) }
        #expect(try await Self.take(store, at: Self.now) != nil, "empty")
        try await store.refundRateLimit("device_user_code", key: "192.0.2.7", bucket: Self.bucket, now: Self.now)
        #expect(try await Self.take(store, at: Self.now) == nil, "the token given back")
        #expect(try await Self.take(store, at: Self.now) != nil)
        // A full bucket (or one nobody used) stays at its capacity.
        try await store.refundRateLimit("device_user_code", key: "192.0.2.8", bucket: Self.bucket, now: Self.now)
        try await store.refundRateLimit("device_user_code", key: "192.0.2.8", bucket: Self.bucket, now: Self.now)
        for _ in 0..<3 { #expect(try await Self.take(store, "192.0.2.8", at: Self.now) == nil) }
        #expect(try await Self.take(store, "192.0.2.8", at: Self.now) != nil, "no more than three")
    }

    @Test(arguments: StoreUnderTest.available)
    func takesAtOnceGetNoMoreThanTheBucketHolds(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let bucket = TokenBucket(capacity: 10, period: 600)
        let results = try await withThrowingTaskGroup(of: Double?.self) { group in
            for _ in 0..<25 {
                group.addTask {
                    try await store.rateLimit(
                        "device_authorization", key: "192.0.2.7", bucket: bucket, now: Self.now, take: true)
                }
            }
            return try await group.reduce(into: [Double?]()) { $0.append($1) }
        }
        #expect(results.filter { $0 == nil }.count == 10, "\(results)")
    }

    @Test(arguments: StoreUnderTest.available)
    func purgingKeepsEveryBucketThatIsNotFullAgain(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        for _ in 0..<3 { #expect(try await Self.take(store, at: Self.now) == nil) }
        // Half refilled at +30 (1.5 tokens), full at +60: a purge before then must keep the bucket.
        try await store.purge(expiredBefore: Make.now + 30)
        #expect(try await Self.take(store, at: Self.now + 30) == nil)
        #expect(try await Self.take(store, at: Self.now + 30) != nil, "the limit survived the purge")
        try await store.purge(expiredBefore: Make.now + 1000)
        for _ in 0..<3 { #expect(try await Self.take(store, at: Self.now + 1000) == nil) }
    }
}
