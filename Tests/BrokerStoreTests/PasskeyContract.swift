import BrokerCore
import BrokerStore
import BrokerTesting
import Foundation
import Testing

/// The ``PasskeyStore`` half of the contract (schema v15): passkeys, user handles and the counter's one
/// conditional write, the same on SQLite and PostgreSQL.
@Suite("Store contract: passkeys")
struct PasskeyContract {
    static func passkey(_ id: String = UUID().uuidString, user: UserID, count: Int64 = 0) -> PasskeyRecord {
        PasskeyRecord(
            id: id, userID: user, publicKey: [0xA5, 0x01, 0x02, 0x03, 0x26, 0xFF, 0x00], algorithm: -7,
            signCount: count,
            transports: ["hybrid", "internal"], backupEligible: true, backedUp: false,
            aaguid: "ea9b8d66-4d01-1d21-3ce4-b6b48cb575d4", name: "Laptop", createdAt: Make.now)
    }

    @Test(arguments: StoreUnderTest.available)
    func aUserHasOneRandomHandle(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        let other = try await store.providerUser(Make.user("google"))
        let handle = try await store.passkeyHandle(user: user.id, orInsert: "h-1")
        #expect(handle == "h-1")
        #expect(try await store.passkeyHandle(user: user.id, orInsert: "h-2") == "h-1", "the first one stays")
        #expect(try await store.passkeyUser(handle: "h-1") == user.id)
        #expect(try await store.passkeyUser(handle: "h-2") == nil)
        await #expect(throws: StoreError.self, "a handle belongs to one user") {
            _ = try await store.passkeyHandle(user: other.id, orInsert: "h-1")
        }
    }

    @Test(arguments: StoreUnderTest.available)
    func passkeysAreAddedOnceListedAndRemovedByTheirOwner(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        let other = try await store.providerUser(Make.user("google"))
        let first = Self.passkey("cred-1", user: user.id)
        var second = Self.passkey("cred-2", user: user.id)
        second.createdAt += 5
        second.transports = []
        try await store.addPasskey(second)
        try await store.addPasskey(first)
        #expect(try await store.passkey(id: "cred-1") == first, "every field round-trips")
        #expect(try await store.passkeys(user: user.id) == [first, second], "oldest first")
        #expect(try await store.passkeys(user: other.id).isEmpty)
        await #expect(throws: StoreError.self, "a credential id is registered once, to anyone") {
            try await store.addPasskey(Self.passkey("cred-1", user: other.id))
        }
        #expect(try await store.removePasskey(id: "cred-1", user: other.id) == false, "not another user's")
        #expect(try await store.removePasskey(id: "cred-1", user: user.id))
        #expect(try await store.removePasskey(id: "cred-1", user: user.id) == false)
        #expect(try await store.passkeys(user: user.id) == [second])
    }

    @Test(arguments: StoreUnderTest.available)
    func aSignInIsRecordedOnlyWhileTheCounterRises(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        try await store.addPasskey(Self.passkey("counting", user: user.id, count: 4))
        try await store.addPasskey(Self.passkey("synced", user: user.id))
        #expect(
            try await store.recordPasskeyUse(id: "counting", signCount: 5, backedUp: true, now: Make.now + 1)
                == .recorded)
        let used = try #require(try await store.passkey(id: "counting"))
        #expect(used.signCount == 5 && used.backedUp && used.lastUsedAt == Make.now + 1)
        for stale in [Int64(5), 3, 0] {
            #expect(
                try await store.recordPasskeyUse(id: "counting", signCount: stale, backedUp: false, now: Make.now + 2)
                    == .counterNotIncreased)
        }
        #expect(try await store.passkey(id: "counting")?.lastUsedAt == Make.now + 1, "a refused use changes nothing")
        // A synced passkey reports 0 every time.
        for time in 1...3 {
            #expect(
                try await store.recordPasskeyUse(
                    id: "synced", signCount: 0, backedUp: true, now: Make.now + Int64(time))
                    == .recorded)
        }
        #expect(try await store.recordPasskeyUse(id: "gone", signCount: 1, backedUp: false, now: Make.now) == .unknown)
    }

    /// Two brokers checking the same assertion at once: one records it.
    @Test(arguments: StoreUnderTest.available)
    func concurrentUsesWithOneCounterRecordOnce(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        try await store.addPasskey(Self.passkey("raced", user: user.id, count: 1))
        let outcomes = try await withThrowingTaskGroup(of: PasskeyUse.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    try await store.recordPasskeyUse(id: "raced", signCount: 2, backedUp: false, now: Make.now)
                }
            }
            return try await group.reduce(into: [PasskeyUse]()) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 == .recorded }.count == 1)
        #expect(outcomes.filter { $0 == .counterNotIncreased }.count == 7)
    }

    @Test(arguments: StoreUnderTest.available)
    func deletingTheUserRemovesTheirPasskeysAndHandle(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        _ = try await store.passkeyHandle(user: user.id, orInsert: "leaving")
        try await store.addPasskey(Self.passkey("leaving-1", user: user.id))
        #expect(try await store.deleteUser(id: user.id, now: Make.now))
        #expect(try await store.passkey(id: "leaving-1") == nil)
        #expect(try await store.passkeyUser(handle: "leaving") == nil)
    }

    /// `broker db copy` carries passkeys and handles, each way.
    @Test func dbCopyCarriesPasskeys() async throws {
        let kinds = StoreUnderTest.available
        for (from, to) in zip(kinds, kinds.reversed()) {
            let source = try await from.make()
            let user = try await source.providerUser(Make.user("google"))
            _ = try await source.passkeyHandle(user: user.id, orInsert: "copied-handle")
            var passkey = Self.passkey("copied", user: user.id, count: 9)
            passkey.lastUsedAt = Make.now + 3
            try await source.addPasskey(passkey)
            let target = try await to.make()
            var tables: [(Schema.Table, [[StoreValue]])] = []
            for table in Schema.tables { tables.append((table, try await source.exportRows(table))) }
            try await target.importRows(tables)
            #expect(try await target.passkey(id: "copied") == passkey, "\(from) to \(to)")
            #expect(try await target.passkeyUser(handle: "copied-handle") == user.id)
        }
    }
}
