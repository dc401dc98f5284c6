import BrokerCore
import BrokerStore
import Testing

/// Every promise of the ``Store`` protocol, written against the protocol alone and run against each store
/// in ``StoreUnderTest``: accounts and users, sessions and refresh-token rotation (RFC 9700 reuse detection),
/// revocation, purging, one-time codes, state markers, CI clients and the token-exchange replay cache —
/// including what must hold when many callers race.
@Suite("Store contract")
struct StoreContract {
    // MARK: Accounts and users

    @Test(arguments: StoreUnderTest.available)
    func pingAnswers(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        try await store.ping()
    }

    @Test(arguments: StoreUnderTest.available)
    func passwordAccountRoundTrip(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = Make.user(email: "ada@example.com", name: "Ada")
        try await store.createPasswordAccount(user: user, email: "ada@example.com", passwordHash: "$scrypt$one")
        let account = try #require(try await store.passwordAccount(email: "ada@example.com"))
        #expect(account.email == "ada@example.com")
        #expect(account.passwordHash == "$scrypt$one")
        #expect(account.user == user)
        #expect(try await store.user(id: user.id) == user)
        #expect(try await store.passwordAccount(email: "nobody@example.com") == nil)
        #expect(try await store.passwordAccount(email: "ADA@example.com") == nil, "emails are matched as given")
    }

    @Test(arguments: StoreUnderTest.available)
    func secondAccountForAnEmailIsAConflictAndWritesNothing(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let first = Make.user(email: "ada@example.com")
        try await store.createPasswordAccount(user: first, email: "ada@example.com", passwordHash: "h1")
        let second = Make.user(email: "ada@example.com")
        await #expect {
            try await store.createPasswordAccount(user: second, email: "ada@example.com", passwordHash: "h2")
        } throws: { error in
            (error as? StoreError)?.code == .conflict
        }
        #expect(try await store.user(id: second.id) == nil, "the losing user row is not left behind")
        #expect(try await store.passwordAccount(email: "ada@example.com")?.passwordHash == "h1")
    }

    @Test(arguments: StoreUnderTest.available)
    func fiftyConcurrentRegistrationsOfOneEmailMakeOneAccount(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let users = (0..<50).map { _ in Make.user(email: "race@example.com") }
        let outcomes = await withTaskGroup(of: String.self) { group in
            for (index, user) in users.enumerated() {
                group.addTask {
                    do {
                        try await store.createPasswordAccount(
                            user: user, email: "race@example.com", passwordHash: "h\(index)")
                        return "created"
                    } catch let error as StoreError where error.code == .conflict {
                        return "conflict"
                    } catch {
                        return "other: \(error)"
                    }
                }
            }
            return await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 == "created" }.count == 1)
        #expect(outcomes.filter { $0 == "conflict" }.count == 49, "\(outcomes.filter { $0.hasPrefix("other") })")
        let account = try #require(try await store.passwordAccount(email: "race@example.com"))
        var existing = 0
        for user in users where try await store.user(id: user.id) != nil { existing += 1 }
        #expect(existing == 1, "exactly one user row: the account's")
        #expect(users.contains { $0.id == account.user.id })
    }

    @Test(arguments: StoreUnderTest.available)
    func passwordHashIsReplacedOnlyFromTheHashItWasReadAs(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        try await store.createPasswordAccount(user: Make.user(), email: "a@example.com", passwordHash: "old")
        try await store.updatePasswordHash(email: "a@example.com", from: "stale", to: "rehash")
        #expect(try await store.passwordAccount(email: "a@example.com")?.passwordHash == "old", "compare-and-set")
        try await store.updatePasswordHash(email: "a@example.com", from: "old", to: "new")
        #expect(try await store.passwordAccount(email: "a@example.com")?.passwordHash == "new")
        try await store.updatePasswordHash(email: "nobody@example.com", from: "old", to: "new")
        #expect(try await store.passwordAccount(email: "nobody@example.com") == nil, "no account is created")
    }

    @Test(arguments: StoreUnderTest.available)
    func aProviderSignInCreatesThenFollowsTheProviderKeepingCreation(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let created = try await store.providerUser(
            Make.user("google", subject: "1234", email: "a@example.com", name: "A", at: 100))
        #expect(created.createdAt == 100 && created.email == "a@example.com" && created.name == "A")
        let updated = try await store.providerUser(
            Make.user("google", subject: "1234", email: "b@example.com", name: nil, at: 200))
        #expect(updated.id == created.id)
        #expect(updated.email == "b@example.com" && updated.name == nil, "name and email follow the provider")
        #expect(updated.createdAt == 100, "the first sign-in's time stays")
        #expect(try await store.user(id: created.id) == updated)
        let other = try await store.providerUser(Make.user("facebook", subject: "1234"))
        #expect(other.id != created.id, "the same subject at another provider is another user")
        #expect(try await store.user(id: UserID(provider: "twitter", subject: "1234")) == nil)
    }

    // MARK: Account recovery (password reset and change)

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

    // MARK: Administration (broker users, broker sessions)

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

    // MARK: Sessions and refresh tokens

    @Test(arguments: StoreUnderTest.available)
    func sessionRoundTrip(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let (user, session, _) = try await Make.signedIn(store)
        #expect(try await store.session(id: session.id) == session)
        let both = try #require(try await store.sessionWithUser(id: session.id))
        #expect(both == SessionView(session: session, user: user, emailVerifiedAt: nil), "no password account")
        #expect(try await store.session(id: "no-such-session") == nil)
        #expect(try await store.sessionWithUser(id: "no-such-session") == nil)
    }

    @Test(arguments: StoreUnderTest.available)
    func rotationSpendsTheTokenAndIssuesItsSuccessor(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let (user, session, first) = try await Make.signedIn(store)
        let second = Make.hash()
        let outcome = try await store.rotateRefreshToken(
            hash: first, nextHash: second, nextExpiresAt: Make.now + 7200, now: Make.now + 10)
        #expect(
            outcome == .rotated(SessionView(session: session, user: user, emailVerifiedAt: nil)),
            "the session and its user, read in the rotation's transaction")
        let third = Make.hash()
        #expect(
            try await store.rotateRefreshToken(
                hash: second, nextHash: third, nextExpiresAt: Make.now + 7200, now: Make.now + 20)
                == .rotated(SessionView(session: session, user: user, emailVerifiedAt: nil)),
            "the successor rotates in turn")
    }

    /// A custom account's `email_verified` comes from the password account; the session's reads carry its
    /// confirmation time so that neither an access token nor `/auth/me` needs a second read.
    @Test(arguments: StoreUnderTest.available)
    func sessionReadsCarryTheAddressConfirmation(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = Make.user(email: "confirm@example.com")
        try await store.createPasswordAccount(user: user, email: "confirm@example.com", passwordHash: "h")
        let session = Make.session(for: user)
        let first = Make.hash()
        try await store.createSession(session, firstToken: Make.token(first, session: session.id))
        let unconfirmed = SessionView(session: session, user: user, emailVerifiedAt: nil)
        #expect(try await store.sessionWithUser(id: session.id) == unconfirmed)
        let second = Make.hash()
        #expect(
            try await store.rotateRefreshToken(
                hash: first, nextHash: second, nextExpiresAt: Make.now + 7200, now: Make.now + 1)
                == .rotated(unconfirmed))

        let link = Make.hash()
        try await store.createEmailLink(
            hash: link, user: user.id, purpose: EmailLinkPurpose.verify, expiresAt: Make.now + 1800, now: Make.now)
        #expect(try await store.verifyEmail(linkHash: link, now: Make.now + 2) == user.id)
        let confirmed = SessionView(session: session, user: user, emailVerifiedAt: Make.now + 2)
        #expect(try await store.sessionWithUser(id: session.id) == confirmed)
        #expect(
            try await store.rotateRefreshToken(
                hash: second, nextHash: Make.hash(), nextExpiresAt: Make.now + 7200, now: Make.now + 3)
                == .rotated(confirmed))
    }

    /// Concurrent reads, as `/auth/me` under load makes them (PostgreSQL answers those that arrive together with
    /// one query): each gets its own session, a revoked one shows its revocation, an unknown id nothing, and two
    /// reads of one id the same answer. Client reads (CI mints) likewise.
    @Test(arguments: StoreUnderTest.available)
    func concurrentReadsEachGetTheirOwnRecord(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        var expected: [String: SessionView?] = [:]
        for index in 0..<12 {
            let user = try await store.providerUser(Make.user("google", email: "u\(index)@example.com"))
            let session = Make.session(for: user)
            try await store.createSession(session, firstToken: Make.token(Make.hash(), session: session.id))
            var view = SessionView(session: session, user: user, emailVerifiedAt: nil)
            if index % 4 == 0 {
                #expect(try await store.revokeSession(id: session.id, now: Make.now + 5))
                view.session.revokedAt = Make.now + 5
            }
            expected[session.id] = view
        }
        expected["no-such-session"] = .some(nil)
        let ids = Array(expected.keys)
        let answers = try await withThrowingTaskGroup(of: (String, SessionView?).self) { group in
            for _ in 0..<10 {
                for id in ids.shuffled() {
                    group.addTask { (id, try await store.sessionWithUser(id: id)) }
                }
            }
            return try await group.reduce(into: [(String, SessionView?)]()) { $0.append($1) }
        }
        #expect(answers.count == ids.count * 10)
        for (id, view) in answers { #expect(view == expected[id], "session \(id)") }

        for index in 0..<6 {
            try await store.createClient(
                ClientRecord(
                    name: "ci-\(index)", secretHash: "hmac-\(index)", scopes: ["deploy"], trust: nil,
                    createdAt: Make.now))
        }
        let clients = try await withThrowingTaskGroup(of: (String, ClientRecord?).self) { group in
            for _ in 0..<8 {
                for name in (0..<7).map({ "ci-\($0)" }).shuffled() {
                    group.addTask { (name, try await store.client(name: name)) }
                }
            }
            return try await group.reduce(into: [(String, ClientRecord?)]()) { $0.append($1) }
        }
        #expect(clients.count == 56)
        for (name, record) in clients {
            if name == "ci-6" {
                #expect(record == nil)
            } else {
                #expect(record?.name == name && record?.secretHash == "hmac-\(name.dropFirst(3))")
            }
        }
    }

    @Test(arguments: StoreUnderTest.available)
    func reuseOfASpentTokenRevokesTheWholeFamily(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let (_, session, first) = try await Make.signedIn(store)
        let second = Make.hash()
        _ = try await store.rotateRefreshToken(
            hash: first, nextHash: second, nextExpiresAt: Make.now + 7200, now: Make.now + 10)
        let replay = try await store.rotateRefreshToken(
            hash: first, nextHash: Make.hash(), nextExpiresAt: Make.now + 7200, now: Make.now + 20)
        #expect(replay == .reused(sessionID: session.id))
        #expect(try await store.session(id: session.id)?.revokedAt == Make.now + 20)
        let successor = try await store.rotateRefreshToken(
            hash: second, nextHash: Make.hash(), nextExpiresAt: Make.now + 7200, now: Make.now + 30)
        #expect(successor == .revoked, "the live successor dies with its family")
    }

    @Test(arguments: StoreUnderTest.available)
    func unknownExpiredAndRevokedTokensDoNotRotate(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        #expect(
            try await store.rotateRefreshToken(
                hash: Make.hash(), nextHash: Make.hash(), nextExpiresAt: Make.now + 60, now: Make.now) == .unknown)

        let (_, expiredSession, expiring) = try await Make.signedIn(store, lifetime: 60)
        let next = Make.hash()
        #expect(
            try await store.rotateRefreshToken(
                hash: expiring, nextHash: next, nextExpiresAt: Make.now + 7200, now: Make.now + 60) == .expired,
            "a token is dead at its expiry second")
        #expect(try await store.session(id: expiredSession.id)?.revokedAt == nil, "expiry is not reuse")
        #expect(
            try await store.rotateRefreshToken(
                hash: next, nextHash: Make.hash(), nextExpiresAt: Make.now + 7200, now: Make.now + 61) == .unknown,
            "an expired token's would-be successor was never stored")

        let (_, session, token) = try await Make.signedIn(store)
        #expect(try await store.revokeSession(id: session.id, now: Make.now + 5))
        #expect(
            try await store.rotateRefreshToken(
                hash: token, nextHash: Make.hash(), nextExpiresAt: Make.now + 7200, now: Make.now + 6) == .revoked)
    }

    @Test(arguments: StoreUnderTest.available)
    func hundredConcurrentRotationsOfOneTokenRotateOnce(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let (_, session, token) = try await Make.signedIn(store)
        let outcomes = try await withThrowingTaskGroup(of: RotationOutcome.self) { group in
            for _ in 0..<100 {
                group.addTask {
                    try await store.rotateRefreshToken(
                        hash: token, nextHash: Make.hash(), nextExpiresAt: Make.now + 7200, now: Make.now + 1)
                }
            }
            return try await group.reduce(into: [RotationOutcome]()) { $0.append($1) }
        }
        let rotated = outcomes.filter { if case .rotated = $0 { true } else { false } }
        #expect(rotated.count == 1, "exactly one caller wins: \(outcomes)")
        #expect(
            outcomes.allSatisfy {
                switch $0 {
                case .rotated, .revoked: true
                case .reused(let id): id == session.id
                default: false
                }
            })
        #expect(try await store.session(id: session.id)?.revokedAt != nil, "the losers' reuse revoked the family")
    }

    @Test(arguments: StoreUnderTest.available)
    func revokingByTokenOrIdEndsTheSessionOnce(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let (_, session, token) = try await Make.signedIn(store)
        #expect(try await store.revokeSession(byRefreshTokenHash: token, now: Make.now + 1))
        #expect(try await store.session(id: session.id)?.revokedAt == Make.now + 1)
        #expect(
            try await store.revokeSession(byRefreshTokenHash: token, now: Make.now + 2),
            "a known token of a revoked session is still known")
        #expect(try await store.session(id: session.id)?.revokedAt == Make.now + 1, "the first revocation stays")
        #expect(try await !store.revokeSession(byRefreshTokenHash: Make.hash(), now: Make.now + 3))

        let (_, other, _) = try await Make.signedIn(store)
        #expect(try await store.revokeSession(id: other.id, now: Make.now + 4))
        #expect(try await !store.revokeSession(id: other.id, now: Make.now + 5), "only an active session revokes")
        #expect(try await !store.revokeSession(id: "no-such-session", now: Make.now + 5))
        #expect(try await store.sessionWithUser(id: other.id)?.session.revokedAt == Make.now + 4)
    }

    @Test(arguments: StoreUnderTest.available)
    func purgeRemovesOnlyWhatExpired(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let (_, dead, deadToken) = try await Make.signedIn(store, lifetime: 10)
        let (liveUser, live, liveToken) = try await Make.signedIn(store, lifetime: 10_000)
        let user = try await store.providerUser(Make.user())
        let oldCode = AuthorizationCodeRecord(
            hash: Make.hash(), userID: user.id, codeChallenge: "c", redirectURI: "http://127.0.0.1:1/cb",
            expiresAt: Make.now + 10)
        let newCode = AuthorizationCodeRecord(
            hash: Make.hash(), userID: user.id, codeChallenge: "c", redirectURI: "http://127.0.0.1:1/cb",
            expiresAt: Make.now + 10_000)
        try await store.createAuthorizationCode(oldCode)
        try await store.createAuthorizationCode(newCode)
        #expect(try await store.spendStateMarker("old", expiresAt: Make.now + 10))
        #expect(try await store.spendStateMarker("new", expiresAt: Make.now + 10_000))
        #expect(try await store.recordExchange(issuer: "https://ci", jti: "old", expiresAt: Make.now + 10))
        #expect(try await store.recordExchange(issuer: "https://ci", jti: "new", expiresAt: Make.now + 10_000))

        try await store.purge(expiredBefore: Make.now + 100)

        #expect(
            try await store.rotateRefreshToken(
                hash: deadToken, nextHash: Make.hash(), nextExpiresAt: Make.now + 200, now: Make.now + 100)
                == .unknown)
        #expect(try await store.session(id: dead.id) == nil, "a session left with no token goes")
        #expect(try await store.session(id: live.id) != nil)
        #expect(
            try await store.rotateRefreshToken(
                hash: liveToken, nextHash: Make.hash(), nextExpiresAt: Make.now + 200, now: Make.now + 100)
                == .rotated(SessionView(session: live, user: liveUser, emailVerifiedAt: nil)))
        #expect(try await store.redeemAuthorizationCode(hash: oldCode.hash, now: Make.now + 100) == .unknown)
        #expect(
            try await store.redeemAuthorizationCode(hash: newCode.hash, now: Make.now + 100) == .redeemed(newCode))
        #expect(try await !store.isStateMarkerSpent("old"))
        #expect(try await store.isStateMarkerSpent("new"))
        #expect(try await store.recordExchange(issuer: "https://ci", jti: "old", expiresAt: Make.now + 10_000))
        #expect(try await !store.recordExchange(issuer: "https://ci", jti: "new", expiresAt: Make.now + 10_000))
    }

    // MARK: Browser flow

    @Test(arguments: StoreUnderTest.available)
    func codeIsRedeemedOnceAndItsReuseNamesTheSession(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        let code = AuthorizationCodeRecord(
            hash: Make.hash(), userID: user.id, codeChallenge: "challenge", redirectURI: "http://127.0.0.1:5/cb",
            expiresAt: Make.now + 60)
        try await store.createAuthorizationCode(code)
        #expect(try await store.redeemAuthorizationCode(hash: code.hash, now: Make.now) == .redeemed(code))
        #expect(try await store.redeemAuthorizationCode(hash: code.hash, now: Make.now) == .reused(sessionID: nil))
        try await store.attachSession(toCode: code.hash, sessionID: "session-1")
        #expect(
            try await store.redeemAuthorizationCode(hash: code.hash, now: Make.now) == .reused(sessionID: "session-1"))
        #expect(try await store.redeemAuthorizationCode(hash: Make.hash(), now: Make.now) == .unknown)
    }

    @Test(arguments: StoreUnderTest.available)
    func concurrentRedemptionsOfOneCodeRedeemOnce(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        let code = AuthorizationCodeRecord(
            hash: Make.hash(), userID: user.id, codeChallenge: "c", redirectURI: "http://127.0.0.1:5/cb",
            expiresAt: Make.now + 60)
        try await store.createAuthorizationCode(code)
        let outcomes = try await withThrowingTaskGroup(of: CodeRedemption.self) { group in
            for _ in 0..<30 {
                group.addTask { try await store.redeemAuthorizationCode(hash: code.hash, now: Make.now) }
            }
            return try await group.reduce(into: [CodeRedemption]()) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 == .redeemed(code) }.count == 1)
        #expect(outcomes.filter { $0 == .reused(sessionID: nil) }.count == 29)
    }

    @Test(arguments: StoreUnderTest.available)
    func stateMarkerIsSpentOnceEvenUnderRaces(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        #expect(try await !store.isStateMarkerSpent("m1"))
        #expect(try await store.spendStateMarker("m1", expiresAt: Make.now + 600))
        #expect(try await store.isStateMarkerSpent("m1"))
        #expect(try await !store.spendStateMarker("m1", expiresAt: Make.now + 600))
        let wins = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<30 { group.addTask { try await store.spendStateMarker("m2", expiresAt: Make.now + 600) } }
            return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
        }
        #expect(wins == 1)
    }

    // MARK: CI clients

    @Test(arguments: StoreUnderTest.available)
    func clientsAreCreatedListedFoundAndDeleted(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let trusted = ClientRecord(
            name: "deploy", secretHash: "hmac-1", scopes: ["deploy", "read"],
            trust: TrustPolicy(
                issuer: "https://token.actions.example", subjectPattern: "repo:org/app:*", audience: "broker",
                maxAge: 300),
            createdAt: Make.now)
        let plain = ClientRecord(
            name: "backup", secretHash: "hmac-2", scopes: ["read"], trust: nil, createdAt: Make.now)
        try await store.createClient(trusted)
        try await store.createClient(plain)
        #expect(try await store.client(name: "deploy") == trusted)
        #expect(try await store.client(name: "backup") == plain)
        #expect(try await store.client(name: "nope") == nil)
        #expect(try await store.clients() == [plain, trusted], "by name")
        await #expect {
            try await store.createClient(
                ClientRecord(name: "deploy", secretHash: "x", scopes: [], trust: nil, createdAt: Make.now))
        } throws: { error in
            (error as? StoreError)?.code == .conflict
        }
        #expect(try await store.client(name: "deploy") == trusted, "the conflict changed nothing")
        #expect(try await store.deleteClient(name: "deploy"))
        #expect(try await !store.deleteClient(name: "deploy"))
        #expect(try await store.client(name: "deploy") == nil)
        #expect(try await store.clients() == [plain])
    }

    @Test(arguments: StoreUnderTest.available)
    func exchangedTokenIsRecordedOncePerIssuer(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        #expect(try await store.recordExchange(issuer: "https://a", jti: "j1", expiresAt: Make.now + 60))
        #expect(try await !store.recordExchange(issuer: "https://a", jti: "j1", expiresAt: Make.now + 60))
        #expect(try await store.recordExchange(issuer: "https://b", jti: "j1", expiresAt: Make.now + 60))
        let wins = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<30 {
                group.addTask {
                    try await store.recordExchange(issuer: "https://a", jti: "j2", expiresAt: Make.now + 60)
                }
            }
            return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
        }
        #expect(wins == 1)
    }
}
