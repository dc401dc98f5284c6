import BrokerCore
import BrokerStore
import BrokerTesting
import Foundation
import Testing

/// The ``PasskeyStore`` half of the contract (schema v15–16): passkeys, user handles, the counter's one
/// conditional write, passkeys as ways in and the address kept for recovery, the same on SQLite and PostgreSQL.
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
        #expect(
            try await store.removePasskey(id: "cred-1", user: other.id, now: Make.now) == .notFound,
            "not another user's")
        #expect(try await store.removePasskey(id: "cred-1", user: user.id, now: Make.now) == .removed)
        #expect(try await store.removePasskey(id: "cred-1", user: user.id, now: Make.now) == .notFound)
        #expect(try await store.passkeys(user: user.id) == [second])
        #expect(
            try await store.removePasskey(id: "cred-2", user: user.id, now: Make.now) == .removed,
            "the Google identity is still a way in")
    }

    /// A custom account with a confirmed address and a passkey drops its password: the passkey is now its way
    /// in (so it cannot go), and the confirmed address stays for recovery by mail.
    @Test(arguments: StoreUnderTest.available)
    func passkeysAreWaysInAndAConfirmedAddressOutlivesThePassword(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let ada = Make.user(email: "ada@example.com")
        try await store.createPasswordAccount(
            user: ada, email: "ada@example.com", passwordHash: "h", verifiedAt: Make.now - 50)
        #expect(try await store.unlinkIdentity(user: ada.id, provider: .custom, now: Make.now) == .lastWayIn)
        try await store.addPasskey(Self.passkey("only", user: ada.id))
        #expect(try await store.passkeyRecoveryUser(email: "ada@example.com") == nil, "the password still works")
        #expect(
            try await store.unlinkIdentity(user: ada.id, provider: .custom, now: Make.now)
                == .unlinked(endedSessions: []), "the passkey counts as a way in")
        #expect(try await store.passwordAccount(user: ada.id) == nil)
        #expect(
            try await store.recoveryAddress(user: ada.id)
                == RecoveryAddress(email: "ada@example.com", verifiedAt: Make.now - 50))
        #expect(try await store.passkeyRecoveryUser(email: "ada@example.com")?.id == ada.id)
        #expect(try await store.passkeyRecoveryUser(email: "bob@example.com") == nil)
        #expect(
            try await store.removePasskey(id: "only", user: ada.id, now: Make.now) == .lastWayIn,
            "the last way in stays")
        #expect(try await store.passkey(id: "only") != nil)

        // With another way in, the account is not "passkeys only": the mail goes nowhere.
        let google = IdentityRecord(provider: "google", subject: "ada-g", email: nil, name: nil)
        #expect(try await store.linkIdentity(google, to: ada.id, now: Make.now) == .linked)
        #expect(try await store.passkeyRecoveryUser(email: "ada@example.com") == nil)
        #expect(try await store.removePasskey(id: "only", user: ada.id, now: Make.now) == .removed)
        #expect(try await store.passkeyRecoveryUser(email: "ada@example.com") == nil, "and none without a passkey")

        // An address never confirmed is not kept.
        let bob = Make.user(email: "bob@example.com")
        try await store.createPasswordAccount(user: bob, email: "bob@example.com", passwordHash: "h")
        try await store.addPasskey(Self.passkey("bobs", user: bob.id))
        #expect(
            try await store.unlinkIdentity(user: bob.id, provider: .custom, now: Make.now)
                == .unlinked(endedSessions: []))
        #expect(try await store.recoveryAddress(user: bob.id) == nil)
        #expect(try await store.passkeyRecoveryUser(email: "bob@example.com") == nil)

        #expect(try await store.deleteUser(id: ada.id, now: Make.now))
        #expect(try await store.recoveryAddress(user: ada.id) == nil, "deleting the account removes it")
    }

    /// Two removals of an account's last two ways in at once: one wins, the other is refused.
    @Test(arguments: StoreUnderTest.available)
    func concurrentRemovalsKeepTheLastWayIn(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let ada = Make.user(email: "ada@example.com")
        try await store.createPasswordAccount(user: ada, email: "ada@example.com", passwordHash: "h", verifiedAt: 1)
        try await store.addPasskey(Self.passkey("one", user: ada.id))
        try await store.addPasskey(Self.passkey("two", user: ada.id))
        #expect(
            try await store.unlinkIdentity(user: ada.id, provider: .custom, now: Make.now)
                == .unlinked(endedSessions: []))
        let outcomes = try await withThrowingTaskGroup(of: PasskeyRemoval.self) { group in
            for id in ["one", "two"] {
                group.addTask { try await store.removePasskey(id: id, user: ada.id, now: Make.now) }
            }
            return try await group.reduce(into: [PasskeyRemoval]()) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 == .removed }.count == 1 && outcomes.contains(.lastWayIn))
        #expect(try await store.passkeys(user: ada.id).count == 1)
    }

    /// Recovery spends the user's own recovery link, once, and ends every session, as a password reset does.
    @Test(arguments: StoreUnderTest.available)
    func recoverySpendsItsLinkOnceAndEndsEverySession(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let ada = try await store.providerUser(Make.user("google"))
        let other = try await store.providerUser(Make.user("google"))
        let session = Make.session(for: ada)
        try await store.createSession(session, firstToken: Make.token(Make.hash(), session: session.id))
        let link = Make.hash()
        let reset = Make.hash()
        try await store.createEmailLink(
            hash: reset, user: ada.id, purpose: EmailLinkPurpose.reset, expiresAt: Make.now + 600, now: Make.now)
        try await store.createEmailLink(
            hash: link, user: ada.id, purpose: EmailLinkPurpose.passkeyRecovery, expiresAt: Make.now + 600,
            now: Make.now)
        #expect(
            try await store.recoverWithPasskey(linkHash: reset, user: ada.id, now: Make.now) == false, "another purpose"
        )
        #expect(
            try await store.recoverWithPasskey(linkHash: link, user: other.id, now: Make.now) == false, "another user")
        #expect(
            try await store.recoverWithPasskey(linkHash: link, user: ada.id, now: Make.now + 601) == false, "expired")
        #expect(try await store.session(id: session.id)?.revokedAt == nil, "refusals change nothing")
        #expect(try await store.recoverWithPasskey(linkHash: link, user: ada.id, now: Make.now + 1))
        #expect(try await store.session(id: session.id)?.revokedAt == Make.now + 1)
        #expect(try await store.recoverWithPasskey(linkHash: link, user: ada.id, now: Make.now + 2) == false, "once")
        #expect(
            try await store.emailLinkUser(hash: link, purpose: EmailLinkPurpose.passkeyRecovery, now: Make.now + 2)
                == nil)
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
            let kept = Make.user(email: "kept@example.com")
            try await source.createPasswordAccount(
                user: kept, email: "kept@example.com", passwordHash: "h", verifiedAt: Make.now - 9)
            try await source.addPasskey(Self.passkey(user: kept.id))
            _ = try await source.unlinkIdentity(user: kept.id, provider: .custom, now: Make.now)
            let target = try await to.make()
            var tables: [(Schema.Table, [[StoreValue]])] = []
            for table in Schema.tables { tables.append((table, try await source.exportRows(table))) }
            try await target.importRows(tables)
            #expect(try await target.passkey(id: "copied") == passkey, "\(from) to \(to)")
            #expect(try await target.passkeyUser(handle: "copied-handle") == user.id)
            #expect(
                try await target.recoveryAddress(user: kept.id)
                    == RecoveryAddress(email: "kept@example.com", verifiedAt: Make.now - 9))
        }
    }
}
