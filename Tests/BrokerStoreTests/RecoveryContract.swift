import BrokerCore
import BrokerStore
import Testing

/// The store contract for account recovery (password reset and change): written against the ``Store`` protocol alone, run against each store
/// in ``StoreUnderTest``.
@Suite("Store contract: account recovery (password reset and change)")
struct RecoveryContract {
    @Test(arguments: StoreUnderTest.available)
    func aResetLinkWorksOnceBeforeItExpiresAndOnlyTheNewestOne(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = Make.user(email: "reset@example.com")
        try await store.createPasswordAccount(user: user, email: "reset@example.com", passwordHash: "old")
        #expect(try await store.passwordAccount(user: user.id)?.passwordHash == "old")
        let first = Make.hash()
        let second = Make.hash()
        try await store.createEmailLink(
            hash: first, user: user.id, purpose: EmailLinkPurpose.reset, expiresAt: Make.now + 1800, now: Make.now)
        #expect(try await store.emailLinkUser(hash: first, purpose: EmailLinkPurpose.reset, now: Make.now) == user)
        #expect(try await store.emailLinkUser(hash: first, purpose: "verify", now: Make.now) == nil, "purpose binds")
        try await store.createEmailLink(
            hash: second, user: user.id, purpose: EmailLinkPurpose.reset, expiresAt: Make.now + 1800, now: Make.now)
        #expect(
            try await store.emailLinkUser(hash: first, purpose: EmailLinkPurpose.reset, now: Make.now) == nil,
            "a newer link ends the older one")
        #expect(try await store.resetPassword(linkHash: first, passwordHash: "bad", now: Make.now) == nil)
        #expect(
            try await store.emailLinkUser(hash: second, purpose: EmailLinkPurpose.reset, now: Make.now + 1800) == nil,
            "expired at its expiry")
        #expect(try await store.resetPassword(linkHash: second, passwordHash: "late", now: Make.now + 1800) == nil)
        #expect(try await store.passwordAccount(email: "reset@example.com")?.passwordHash == "old")
        #expect(try await store.resetPassword(linkHash: second, passwordHash: "new", now: Make.now + 60) == user.id)
        #expect(try await store.passwordAccount(email: "reset@example.com")?.passwordHash == "new")
        #expect(
            try await store.resetPassword(linkHash: second, passwordHash: "again", now: Make.now + 61) == nil,
            "spent")
        #expect(try await store.passwordAccount(email: "reset@example.com")?.passwordHash == "new")
        #expect(try await store.resetPassword(linkHash: Make.hash(), passwordHash: "x", now: Make.now) == nil)
    }

    @Test(arguments: StoreUnderTest.available)
    func aResetRevokesEverySessionOfTheUserAndNoOtherAndRacesSpendTheLinkOnce(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = Make.user(email: "sessions@example.com")
        try await store.createPasswordAccount(user: user, email: "sessions@example.com", passwordHash: "old")
        let mine = [Make.session(for: user), Make.session(for: user)]
        for session in mine {
            try await store.createSession(session, firstToken: Make.token(Make.hash(), session: session.id))
        }
        let (_, otherSession, _) = try await Make.signedIn(store)
        let link = Make.hash()
        try await store.createEmailLink(
            hash: link, user: user.id, purpose: EmailLinkPurpose.reset, expiresAt: Make.now + 1800, now: Make.now)
        let winners = await withTaskGroup(of: UserID?.self) { group in
            for index in 0..<10 {
                group.addTask {
                    try? await store.resetPassword(linkHash: link, passwordHash: "new\(index)", now: Make.now + 1)
                }
            }
            return await group.reduce(into: [UserID]()) { if let id = $1 { $0.append(id) } }
        }
        #expect(winners == [user.id], "one reset per link")
        for session in mine { #expect(try await store.session(id: session.id)?.revokedAt == Make.now + 1) }
        #expect(try await store.session(id: otherSession.id)?.revokedAt == nil)
    }

    @Test(arguments: StoreUnderTest.available)
    func aPasswordChangeIsCompareAndSetKeepsOneSessionAndEndsOpenLinks(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = Make.user(email: "change@example.com")
        try await store.createPasswordAccount(user: user, email: "change@example.com", passwordHash: "old")
        let kept = Make.session(for: user)
        let other = Make.session(for: user)
        for session in [kept, other] {
            try await store.createSession(session, firstToken: Make.token(Make.hash(), session: session.id))
        }
        let link = Make.hash()
        try await store.createEmailLink(
            hash: link, user: user.id, purpose: EmailLinkPurpose.reset, expiresAt: Make.now + 1800, now: Make.now)
        #expect(
            try await store.changePassword(
                user: user.id, from: "wrong", to: "x", keepingSession: kept.id, now: Make.now)
                == false)
        #expect(try await store.session(id: other.id)?.revokedAt == nil, "a failed change revokes nothing")
        #expect(
            try await store.changePassword(
                user: user.id, from: "old", to: "new", keepingSession: kept.id, now: Make.now))
        #expect(try await store.passwordAccount(email: "change@example.com")?.passwordHash == "new")
        #expect(try await store.session(id: kept.id)?.revokedAt == nil)
        #expect(try await store.session(id: other.id)?.revokedAt == Make.now)
        #expect(
            try await store.resetPassword(linkHash: link, passwordHash: "undo", now: Make.now + 1) == nil,
            "a link sent before the change cannot undo it")
        #expect(
            try await store.changePassword(user: user.id, from: "old", to: "newer", keepingSession: nil, now: Make.now)
                == false, "the second of two changes from the same password loses")
        #expect(try await store.passwordAccount(user: Make.user(email: "none@example.com").id) == nil)
    }
}
