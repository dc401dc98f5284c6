import BrokerCore
import BrokerStore
import BrokerTesting
import Testing

/// The ``DeviceStore`` half of the contract (schema v9, RFC 8628), for SQLite and PostgreSQL alike.
@Suite("Store contract: device authorizations")
struct DeviceContract {
    static func record(_ code: String, hash: [UInt8] = Make.hash(), at time: Int64 = Make.now) -> DeviceAuthorization {
        DeviceAuthorization(
            deviceCodeHash: hash, userCode: code, clientID: "broker-cli", provider: "google",
            clientAddress: "192.0.2.7", createdAt: time, expiresAt: time + 600, interval: 5)
    }

    @Test(arguments: StoreUnderTest.available)
    func anApprovalIsHandedOutOnceAtTheRightPace(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        let hash = Make.hash()
        let now = Make.now
        #expect(
            try await store.createDeviceAuthorization(Self.record("BCDFGHJK", hash: hash), maxPending: 10, now: now))
        let pending = try #require(try await store.pendingDeviceAuthorization(userCode: "BCDFGHJK", now: now))
        #expect(pending == Self.record("BCDFGHJK", hash: hash))
        #expect(try await store.pollDeviceAuthorization(hash: hash, now: now) == .pending)
        #expect(try await store.pollDeviceAuthorization(hash: hash, now: now + 2) == .slowDown(interval: 10))
        #expect(try await store.pollDeviceAuthorization(hash: hash, now: now + 11) == .pending, "9 s of 10: tolerated")
        #expect(
            try await store.decideDeviceAuthorization(
                userCode: "BCDFGHJK", user: user.id, signedInWith: "google", now: now + 12))
        #expect(
            try await !store.decideDeviceAuthorization(
                userCode: "BCDFGHJK", user: nil, signedInWith: nil, now: now + 12), "once")
        #expect(try await store.pendingDeviceAuthorization(userCode: "BCDFGHJK", now: now + 12) == nil)
        let polls = try await withThrowingTaskGroup(of: DevicePoll.self) { group in
            for _ in 0..<2 { group.addTask { try await store.pollDeviceAuthorization(hash: hash, now: now + 30) } }
            return try await group.reduce(into: [DevicePoll]()) { $0.append($1) }
        }
        #expect(
            polls.filter { $0 == .approved(user.id, signedInWith: "google") }.count == 1,
            "two pollers: one gets the approval, with the way in the person used")
        #expect(polls.contains(.spent))
        #expect(try await store.pollDeviceAuthorization(hash: hash, now: now + 60) == .spent)
        #expect(try await store.pollDeviceAuthorization(hash: Make.hash(), now: now) == .unknown)
    }

    @Test(arguments: StoreUnderTest.available)
    func denialsExpiryAndTheBoundOnPendingCodes(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let denied = Make.hash()
        #expect(
            try await store.createDeviceAuthorization(
                Self.record("DDDDDDDD", hash: denied), maxPending: 2, now: Make.now))
        #expect(
            try await store.decideDeviceAuthorization(userCode: "DDDDDDDD", user: nil, signedInWith: nil, now: Make.now)
        )
        #expect(try await store.pollDeviceAuthorization(hash: denied, now: Make.now) == .denied)
        let late = Make.hash()
        #expect(
            try await store.createDeviceAuthorization(Self.record("LLLLLLLL", hash: late), maxPending: 2, now: Make.now)
        )
        #expect(try await store.createDeviceAuthorization(Self.record("MMMMMMMM"), maxPending: 2, now: Make.now))
        #expect(
            try await !store.createDeviceAuthorization(Self.record("NNNNNNNN"), maxPending: 2, now: Make.now),
            "two pending already")
        #expect(try await store.pollDeviceAuthorization(hash: late, now: Make.now + 600) == .expired)
        #expect(try await store.pendingDeviceAuthorization(userCode: "LLLLLLLL", now: Make.now + 600) == nil)
        #expect(
            try await !store.decideDeviceAuthorization(
                userCode: "LLLLLLLL", user: nil, signedInWith: nil, now: Make.now + 600))
        #expect(
            try await store.createDeviceAuthorization(Self.record("NNNNNNNN"), maxPending: 2, now: Make.now + 600),
            "expired ones do not count")
        await #expect {
            try await store.createDeviceAuthorization(Self.record("MMMMMMMM"), maxPending: 10, now: Make.now + 600)
        } throws: { ($0 as? StoreError)?.code == .conflict }
        try await store.purge(expiredBefore: Make.now + 10_000)
        #expect(try await store.pollDeviceAuthorization(hash: late, now: Make.now) == .unknown, "purged")
    }
}
