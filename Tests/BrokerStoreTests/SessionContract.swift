import BrokerCore
import BrokerStore
import Testing

/// The store contract for sessions and refresh tokens: written against the ``Store`` protocol alone, run against each store
/// in ``StoreUnderTest``.
@Suite("Store contract: sessions and refresh tokens")
struct SessionContract {
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

    /// A provider's profile (schema v22) is the user's when the user was made from that identity: kept at the first
    /// sign-in, its time moved only when it changes; a user without one reads as none, since its creation.
    @Test(arguments: StoreUnderTest.available)
    func aUsersProfileFollowsItsProviderAndSaysWhenItChanged(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        var identity = IdentityRecord(
            provider: "google", subject: "p-1", email: "p@example.com", name: "P", profile: ["given_name": "P"])
        guard case .user(let user) = try await store.signIn(identity, now: Make.now) else {
            Issue.record("no user")
            return
        }
        #expect(
            try await store.userProfile(id: user.id) == UserProfile(claims: ["given_name": "P"], updatedAt: Make.now))
        _ = try await store.signIn(identity, now: Make.now + 100)
        #expect(try await store.userProfile(id: user.id)?.updatedAt == Make.now, "the same profile: the same time")
        identity.profile = ["given_name": "Pat", "locale": "fr"]
        _ = try await store.signIn(identity, now: Make.now + 200)
        #expect(
            try await store.userProfile(id: user.id)
                == UserProfile(claims: ["given_name": "Pat", "locale": "fr"], updatedAt: Make.now + 200))
        identity.profile = [:]
        _ = try await store.signIn(identity, now: Make.now + 300)
        #expect(try await store.userProfile(id: user.id)?.claims["given_name"] == "Pat", "none sent: kept")
        let plain = try await store.providerUser(Make.user("github"))
        #expect(try await store.userProfile(id: plain.id) == UserProfile(claims: [:], updatedAt: plain.createdAt))
        #expect(try await store.userProfile(id: try #require(UserID("google:nobody"))) == nil)
    }

    /// What a sign-in's claims parameter asked userinfo for is kept with the session (schema v20): read by
    /// session(id:), left out of the token paths' reads.
    @Test(arguments: StoreUnderTest.available)
    func aSessionKeepsTheClaimsItsSignInAskedFor(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        var session = Make.session(for: user)
        session.claims = #"{"userinfo":{"name":{"essential":true}}}"#
        try await store.createSession(session, firstToken: Make.token(Make.hash(), session: session.id))
        #expect(try await store.session(id: session.id)?.claims == session.claims)
        #expect(try await store.sessionWithUser(id: session.id)?.session.claims == nil)
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
            hash: Make.hash(), clientID: "broker-cli", userID: user.id, redirectURI: "http://127.0.0.1:1/cb",
            codeChallenge: "c", authTime: Make.now, signedInWith: "google", expiresAt: Make.now + 10)
        let newCode = AuthorizationCodeRecord(
            hash: Make.hash(), clientID: "broker-cli", userID: user.id, redirectURI: "http://127.0.0.1:1/cb",
            codeChallenge: "c", authTime: Make.now, signedInWith: "google", expiresAt: Make.now + 10_000)
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
}
