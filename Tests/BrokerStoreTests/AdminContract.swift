import BrokerCore
import BrokerStore
import Testing

/// The store contract for administration (broker users, broker sessions): written against the ``Store`` protocol alone, run against each store
/// in ``StoreUnderTest``.
@Suite("Store contract: administration (broker users, broker sessions)")
struct AdminContract {
    @Test(arguments: StoreUnderTest.available)
    func usersAreListedOldestFirstAndByProvider(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let google = try await store.providerUser(Make.user("google", at: 200))
        let custom = Make.user(email: "c@example.com", at: 100)
        try await store.createPasswordAccount(user: custom, email: "c@example.com", passwordHash: "h")
        let facebook = try await store.providerUser(Make.user("facebook", at: 300))
        #expect(try await store.users(provider: nil).map(\.user.id) == [custom.id, google.id, facebook.id])
        #expect(try await store.users(provider: ProviderID("google")) == [UserStatus(user: google, disabledAt: nil)])
        #expect(try await store.users(provider: ProviderID("twitter")).isEmpty)
    }

    @Test(arguments: StoreUnderTest.available)
    func deletingAUserTakesEverythingOfTheirsAndNothingElse(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let (user, session, token) = try await Make.signedIn(store)
        let (other, otherSession, otherToken) = try await Make.signedIn(store)
        let account = Make.user(email: "gone@example.com")
        try await store.createPasswordAccount(user: account, email: "gone@example.com", passwordHash: "h")

        #expect(try await store.deleteUser(id: user.id, now: Make.now))
        #expect(try await store.deleteUser(id: user.id, now: Make.now) == false, "a second delete finds nothing")
        #expect(try await store.user(id: user.id) == nil)
        #expect(try await store.session(id: session.id) == nil, "the user's sessions go with them")
        #expect(try await store.sessionWithUser(id: session.id) == nil)
        let spent = try await store.rotateRefreshToken(
            hash: token, nextHash: Make.hash(), nextExpiresAt: Make.now + 60, now: Make.now)
        #expect(spent == .unknown, "their refresh token no longer exists")

        #expect(try await store.deleteUser(id: account.id, now: Make.now))
        #expect(try await store.passwordAccount(email: "gone@example.com") == nil, "the password account goes too")

        #expect(try await store.user(id: other.id) == other, "nobody else is touched")
        #expect(try await store.session(id: otherSession.id) != nil)
        let rotated = try await store.rotateRefreshToken(
            hash: otherToken, nextHash: Make.hash(), nextExpiresAt: Make.now + 60, now: Make.now)
        guard case .rotated = rotated else {
            Issue.record("another user's token stopped rotating: \(rotated)")
            return
        }
    }

    @Test(arguments: StoreUnderTest.available)
    func aDisabledUserLosesTheirSessionsAndCannotStartOneUntilEnabled(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let (user, session, token) = try await Make.signedIn(store)
        let (other, otherSession, _) = try await Make.signedIn(store)

        #expect(try await store.setUserDisabled(id: user.id, disabled: true, now: 500))
        #expect(try await store.userStatus(id: user.id) == UserStatus(user: user, disabledAt: 500))
        #expect(try await store.session(id: session.id)?.revokedAt == 500, "their live session ends with it")
        let refused = try await store.rotateRefreshToken(
            hash: token, nextHash: Make.hash(), nextExpiresAt: Make.now + 60, now: Make.now)
        #expect(refused == .revoked)
        let attempt = Make.session(for: user)
        await #expect {
            try await store.createSession(attempt, firstToken: Make.token(Make.hash(), session: attempt.id))
        } throws: { error in
            (error as? StoreError)?.code == .disabled
        }
        #expect(try await store.session(id: attempt.id) == nil, "nothing was written")
        #expect(try await store.setUserDisabled(id: user.id, disabled: true, now: 900))
        #expect(try await store.userStatus(id: user.id)?.disabledAt == 500, "disabling again keeps the first time")

        #expect(try await store.setUserDisabled(id: user.id, disabled: false, now: 1000))
        #expect(try await store.userStatus(id: user.id)?.disabledAt == nil)
        let again = Make.session(for: user)
        try await store.createSession(again, firstToken: Make.token(Make.hash(), session: again.id))
        #expect(try await store.session(id: again.id)?.revokedAt == nil)

        #expect(try await store.session(id: otherSession.id)?.revokedAt == nil, "nobody else is touched")
        #expect(try await store.userStatus(id: other.id)?.disabledAt == nil)
        #expect(
            try await store.setUserDisabled(id: UserID(provider: "google", subject: "nobody"), disabled: true, now: 1)
                == false)
    }

    @Test(arguments: StoreUnderTest.available)
    func aDisableRacingSessionStartsLeavesNoLiveSession(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let (user, _, _) = try await Make.signedIn(store)
        let started = await withTaskGroup(of: String?.self) { group in
            for index in 0..<20 {
                group.addTask {
                    if index == 10 {
                        _ = try? await store.setUserDisabled(id: user.id, disabled: true, now: Make.now)
                        return nil
                    }
                    let session = Make.session(for: user)
                    do {
                        try await store.createSession(session, firstToken: Make.token(Make.hash(), session: session.id))
                        return session.id
                    } catch {
                        return nil
                    }
                }
            }
            return await group.reduce(into: [String]()) { if let id = $1 { $0.append(id) } }
        }
        let sessions = try await store.sessions(user: user.id)
        #expect(sessions.allSatisfy { $0.revokedAt != nil }, "a session that started beside the disable survived it")
        #expect(sessions.count == started.count + 1)
    }

    @Test(arguments: StoreUnderTest.available)
    func auditEventsComeBackInOrderFilteredAndLimitedToTheNewest(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let ada = "custom:ada"
        for (index, user) in [ada, nil, ada, "google:1", ada].enumerated() {
            try await store.appendAuditEvent(
                AuditEventRecord(
                    time: 100 + Int64(index), event: "e\(index)", userID: user, document: #"{"n":\#(index)}"#))
        }
        #expect(
            try await store.auditEvents(user: nil, since: nil, limit: 100).map(\.event) == [
                "e0", "e1", "e2", "e3", "e4",
            ])
        let mine = try await store.auditEvents(user: UserID(ada), since: nil, limit: 100)
        #expect(mine.map(\.event) == ["e0", "e2", "e4"])
        #expect(mine.first?.document == #"{"n":0}"#)
        #expect(try await store.auditEvents(user: nil, since: 103, limit: 100).map(\.event) == ["e3", "e4"])
        #expect(
            try await store.auditEvents(user: nil, since: nil, limit: 2).map(\.event) == ["e3", "e4"], "the newest")
        #expect(try await store.auditEvents(user: UserID("custom:nobody"), since: nil, limit: 10).isEmpty)

        // Retention: what is older than the cut goes, what is at it or newer stays.
        #expect(try await store.purgeAuditEvents(before: 102) == 2)
        #expect(try await store.auditEvents(user: nil, since: nil, limit: 100).map(\.event) == ["e2", "e3", "e4"])
        #expect(try await store.purgeAuditEvents(before: 102) == 0)
    }

    @Test(arguments: StoreUnderTest.available)
    func sessionsAreListedNewestFirstAndRevokedPerUser(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        let older = Make.session(for: user, at: 100)
        let newer = Make.session(for: user, at: 200)
        try await store.createSession(older, firstToken: Make.token(Make.hash(), session: older.id))
        try await store.createSession(newer, firstToken: Make.token(Make.hash(), session: newer.id))
        let (other, otherSession, _) = try await Make.signedIn(store)
        #expect(try await store.sessions(user: user.id).map(\.id) == [newer.id, older.id])
        #expect(try await store.sessions(user: nil).count == 3)
        #expect(try await store.revokeSession(id: older.id, now: 300))

        #expect(try await store.revokeSessions(user: user.id, now: 400) == 1, "only the live one counts")
        let listed = try await store.sessions(user: user.id)
        #expect(listed.map(\.revokedAt) == [400, 300])
        #expect(try await store.revokeSessions(user: user.id, now: 500) == 0)
        #expect(try await store.sessions(user: other.id).map(\.revokedAt) == [nil], "another user's session stays")
        #expect(try await store.session(id: otherSession.id)?.revokedAt == nil)
    }
}
