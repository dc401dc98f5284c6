import BrokerCore
import BrokerStore
import BrokerTesting
import Foundation
import GRDB
import Testing

/// The ``IdentityStore`` half of the contract (schema v8): which provider accounts sign in as which user,
/// linking and unlinking, for SQLite and PostgreSQL alike — including two links racing.
@Suite("Store contract: linked identities")
struct IdentityContract {
    static func google(_ subject: String = "1045", email: String? = "g@example.com") -> IdentityRecord {
        IdentityRecord(provider: "google", subject: subject, email: email, name: "G")
    }

    static func user(_ store: any Store, _ identity: IdentityRecord, now: Int64 = Make.now) async throws -> UserRecord {
        guard case .user(let user) = try await store.signIn(identity, now: now) else {
            throw TestSupportError("\(identity.derivedUserID) signs in as nobody")
        }
        return user
    }

    /// A custom user with a password account.
    static func custom(_ store: any Store, _ email: String) async throws -> UserRecord {
        let user = Make.user(email: email)
        try await store.createPasswordAccount(user: user, email: email, passwordHash: "h")
        return user
    }

    @Test(arguments: StoreUnderTest.available)
    func aFirstSignInMakesAUserWithItsIdentityAndLaterOnesFollowTheProvider(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let first = try await Self.user(store, Self.google(), now: 100)
        #expect(first.id == UserID(provider: "google", subject: "1045") && first.createdAt == 100)
        let linked = try await store.identities(user: first.id)
        #expect(linked == [LinkedIdentity(identity: Self.google(), userID: first.id, linkedAt: 100)])
        #expect(try await store.identityOwner(provider: "google", subject: "1045") == first.id)
        let again = try await Self.user(store, Self.google(email: "new@example.com"), now: 200)
        #expect(again.id == first.id && again.email == "new@example.com" && again.createdAt == 100)
        #expect(try await store.identities(user: first.id).first?.identity.email == "new@example.com")
        #expect(try await store.identityOwner(provider: "facebook", subject: "1045") == nil)
    }

    @Test(arguments: StoreUnderTest.available)
    func aLinkedIdentitySignsInAsItsUserWithoutChangingTheirProfile(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let ada = try await Self.custom(store, "ada@example.com")
        #expect(try await store.linkIdentity(Self.google(), to: ada.id, now: 300) == .linked)
        let signedIn = try await Self.user(store, Self.google(email: "other@example.com"))
        #expect(signedIn.id == ada.id, "the custom user's id, not google:1045")
        #expect(signedIn.email == "ada@example.com", "a linked identity does not rewrite the user's email")
        #expect(try await store.user(id: UserID(provider: "google", subject: "1045")) == nil, "no second user")
        #expect(try await store.identities(user: ada.id).map(\.linkedAt) == [300])
        #expect(try await store.linkIdentity(Self.google(), to: ada.id, now: 400) == .alreadyLinked)
    }

    @Test(arguments: StoreUnderTest.available)
    func anIdentityBelongsToOneUserAndAUserHasOnePerProvider(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let owner = try await Self.user(store, Self.google())
        let ada = try await Self.custom(store, "ada@example.com")
        #expect(try await store.linkIdentity(Self.google(), to: ada.id, now: Make.now) == .ownedByAnotherUser)
        #expect(try await store.identityOwner(provider: "google", subject: "1045") == owner.id, "unchanged")
        #expect(try await store.linkIdentity(Self.google("2000"), to: ada.id, now: Make.now) == .linked)
        #expect(
            try await store.linkIdentity(Self.google("3000"), to: ada.id, now: Make.now)
                == .providerTaken(subject: "2000"))
        #expect(try await store.identities(user: ada.id).map(\.identity.subject) == ["2000"])
        #expect(
            try await store.linkIdentity(Self.google("4000"), to: Make.user().id, now: Make.now) == .userMissing)
    }

    @Test(arguments: StoreUnderTest.available)
    func twoUsersLinkingOneIdentityAtOnceGiveOneLink(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        var users: [UserID] = []
        for index in 0..<8 { users.append(try await Self.custom(store, "racer\(index)@example.com").id) }
        let outcomes = try await withThrowingTaskGroup(of: LinkOutcome.self) { group in
            for user in users {
                group.addTask { try await store.linkIdentity(Self.google("race"), to: user, now: Make.now) }
            }
            return try await group.reduce(into: [LinkOutcome]()) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 == .linked }.count == 1)
        #expect(outcomes.filter { $0 == .ownedByAnotherUser }.count == users.count - 1)
        let owner = try #require(try await store.identityOwner(provider: "google", subject: "race"))
        #expect(users.contains(owner))
        #expect(try await Self.user(store, Self.google("race")).id == owner)
    }

    @Test(arguments: StoreUnderTest.available)
    func firstSignInsOfOneIdentityAtOnceMakeOneUser(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let ids = try await withThrowingTaskGroup(of: UserID.self) { group in
            for _ in 0..<10 { group.addTask { try await Self.user(store, Self.google("burst")).id } }
            return try await group.reduce(into: Set<UserID>()) { $0.insert($1) }
        }
        #expect(ids == [UserID(provider: "google", subject: "burst")])
        #expect(try await store.identities(user: UserID(provider: "google", subject: "burst")).count == 1)
    }

    @Test(arguments: StoreUnderTest.available)
    func aPasswordWayInIsAddedOnceUnderTheUniqueEmail(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await Self.user(store, Self.google())
        _ = try await Self.custom(store, "taken@example.com")
        #expect(
            try await store.addPasswordAccount(user: user.id, email: "taken@example.com", passwordHash: "x", now: 1)
                == .emailTaken)
        #expect(try await store.passwordAccount(user: user.id) == nil, "nothing was added")
        #expect(
            try await store.addPasswordAccount(user: user.id, email: "g@example.com", passwordHash: "h1", now: 1)
                == .added)
        let account = try #require(try await store.passwordAccount(email: "g@example.com"))
        #expect(account.user.id == user.id && account.passwordHash == "h1" && account.emailVerifiedAt == nil)
        #expect(
            try await store.addPasswordAccount(user: user.id, email: "second@example.com", passwordHash: "h", now: 1)
                == .alreadyHasOne)
        #expect(
            try await store.addPasswordAccount(user: Make.user().id, email: "n@example.com", passwordHash: "h", now: 1)
                == .userMissing)
    }

    @Test(arguments: StoreUnderTest.available)
    func unlinkingNeverRemovesTheLastWayIn(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let ada = try await Self.custom(store, "ada@example.com")
        #expect(try await store.unlinkIdentity(user: ada.id, provider: .custom, now: 1) == .lastWayIn)
        #expect(try await store.unlinkIdentity(user: ada.id, provider: "google", now: 1) == .notLinked)
        #expect(try await store.linkIdentity(Self.google(), to: ada.id, now: 1) == .linked)
        try await store.createEmailLink(
            hash: Array(repeating: 7, count: 32), user: ada.id, purpose: EmailLinkPurpose.reset,
            expiresAt: Make.now + 600, now: Make.now)
        #expect(
            try await store.unlinkIdentity(user: ada.id, provider: .custom, now: Make.now)
                == .unlinked(endedSessions: []))
        #expect(try await store.passwordAccount(email: "ada@example.com") == nil)
        #expect(
            try await store.emailLinkUser(hash: Array(repeating: 7, count: 32), purpose: "reset", now: Make.now) == nil,
            "a reset link for the removed password is spent")
        #expect(try await store.user(id: ada.id) != nil, "the user and their id stay")
        #expect(try await Self.user(store, Self.google()).id == ada.id, "Google still signs in as Ada")
        #expect(try await store.unlinkIdentity(user: ada.id, provider: "google", now: 1) == .lastWayIn)
        #expect(try await store.identities(user: ada.id).count == 1)
    }

    @Test(arguments: StoreUnderTest.available)
    func unlinkingEndsTheSessionsStartedWithThatWayInOnly(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let ada = try await Self.custom(store, "ada@example.com")
        #expect(try await store.linkIdentity(Self.google(), to: ada.id, now: 1) == .linked)
        let viaGoogle = Make.session(for: ada, id: "s-google-1", signedInWith: "google")
        let viaGoogleToo = Make.session(for: ada, id: "s-google-2", signedInWith: "google")
        let viaPassword = Make.session(for: ada, id: "s-custom", signedInWith: .custom)
        let olderThanV10 = Make.session(for: ada, id: "s-unknown")
        let revokedAlready = Make.session(for: ada, id: "s-google-revoked", signedInWith: "google")
        let googleToken = Make.hash()
        try await store.createSession(viaGoogle, firstToken: Make.token(googleToken, session: viaGoogle.id))
        for session in [viaGoogleToo, viaPassword, olderThanV10, revokedAlready] {
            try await store.createSession(session, firstToken: Make.token(Make.hash(), session: session.id))
        }
        #expect(try await store.revokeSession(id: revokedAlready.id, now: Make.now))
        // Every read of a session carries the way in it was started with.
        #expect(try await store.session(id: viaGoogle.id)?.signedInWith == "google")
        #expect(try await store.sessionWithUser(id: viaPassword.id)?.session.signedInWith == .custom)
        #expect(try await store.session(id: olderThanV10.id)?.signedInWith == nil)
        #expect(
            Set(try await store.sessions(user: ada.id).map { "\($0.id)=\($0.signedInWith?.rawValue ?? "-")" }) == [
                "s-google-1=google", "s-google-2=google", "s-custom=custom", "s-unknown=-", "s-google-revoked=google",
            ])

        #expect(
            try await store.unlinkIdentity(user: ada.id, provider: "google", now: Make.now + 5)
                == .unlinked(endedSessions: ["s-google-1", "s-google-2"]),
            "the live sessions started with Google, and only those")
        let after = Dictionary(uniqueKeysWithValues: try await store.sessions(user: ada.id).map { ($0.id, $0) })
        #expect(after["s-google-1"]?.revokedAt == Make.now + 5 && after["s-google-2"]?.revokedAt == Make.now + 5)
        #expect(after["s-google-revoked"]?.revokedAt == Make.now, "an earlier revocation is kept")
        #expect(after["s-custom"]?.revokedAt == nil && after["s-unknown"]?.revokedAt == nil)
        #expect(
            try await store.rotateRefreshToken(
                hash: googleToken, nextHash: Make.hash(), nextExpiresAt: Make.now + 3600, now: Make.now + 6)
                == .revoked,
            "a refresh token of an ended session is refused")

        // The password's sessions, with a second factor or without, end with the password; the others stay.
        let withCode = Make.session(for: ada, id: "s-custom-otp", signedInWith: .customOTP)
        try await store.createSession(withCode, firstToken: Make.token(Make.hash(), session: withCode.id))
        let cookie = Make.hash()
        try await store.createBrowserSession(
            BrowserSessionRecord(
                id: "b-otp", userID: ada.id, signedInWith: .customOTP, authTime: Make.now, expiresAt: Make.now + 600),
            cookieHash: cookie)
        #expect(try await store.linkIdentity(Self.google(), to: ada.id, now: Make.now + 7) == .linked)
        #expect(
            try await store.unlinkIdentity(user: ada.id, provider: .custom, now: Make.now + 8)
                == .unlinked(endedSessions: ["s-custom", "s-custom-otp"]))
        #expect(try await store.browserSession(cookieHash: cookie, now: Make.now + 9) == nil, "its browser session too")
        #expect(try await store.session(id: "s-unknown")?.revokedAt == nil)
    }

    @Test(arguments: StoreUnderTest.available)
    func codesAndDeviceApprovalsCarryTheWayIn(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await Self.user(store, Self.google())
        let hash = Make.hash()
        try await store.createAuthorizationCode(
            AuthorizationCodeRecord(
                hash: hash, clientID: "broker-cli", userID: user.id, redirectURI: "http://127.0.0.1:9/cb",
                codeChallenge: "c", authTime: Make.now, signedInWith: "google", expiresAt: Make.now + 60))
        guard case .redeemed(let code) = try await store.redeemAuthorizationCode(hash: hash, now: Make.now) else {
            Issue.record("the code was not redeemed")
            return
        }
        #expect(code.signedInWith == "google")
        let device = Make.hash()
        #expect(
            try await store.createDeviceAuthorization(
                DeviceContract.record("WAYWAYWA", hash: device), maxPending: 10, now: Make.now))
        #expect(
            try await store.decideDeviceAuthorization(
                userCode: "WAYWAYWA", user: user.id, signedInWith: .custom, now: Make.now))
        #expect(
            try await store.pollDeviceAuthorization(hash: device, now: Make.now + 10)
                == .approved(user.id, signedInWith: .custom))
    }

    @Test(arguments: StoreUnderTest.available)
    func twoUnlinksAtOnceLeaveOneWayIn(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let ada = try await Self.custom(store, "ada@example.com")
        #expect(try await store.linkIdentity(Self.google(), to: ada.id, now: 1) == .linked)
        let outcomes = try await withThrowingTaskGroup(of: UnlinkOutcome.self) { group in
            group.addTask { try await store.unlinkIdentity(user: ada.id, provider: .custom, now: 2) }
            group.addTask { try await store.unlinkIdentity(user: ada.id, provider: "google", now: 2) }
            return try await group.reduce(into: [UnlinkOutcome]()) { $0.append($1) }
        }
        #expect(outcomes.sorted { "\($0)" < "\($1)" } == [.lastWayIn, .unlinked(endedSessions: [])])
        let left =
            try await store.identities(user: ada.id).count
            + (try await store.passwordAccount(user: ada.id) == nil ? 0 : 1)
        #expect(left == 1)
    }

    @Test(arguments: StoreUnderTest.available)
    func anIdentityUnlinkedFromItsOwnUserSignsInAsNobodyUntilLinkedBack(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let gina = try await Self.user(store, Self.google())
        #expect(
            try await store.addPasswordAccount(user: gina.id, email: "g@example.com", passwordHash: "h", now: 1)
                == .added)
        #expect(
            try await store.unlinkIdentity(user: gina.id, provider: "google", now: 2) == .unlinked(endedSessions: []))
        #expect(try await store.signIn(Self.google(), now: 3) == .unlinked(from: gina.id))
        #expect(try await store.identities(user: gina.id).isEmpty, "the refused sign-in wrote nothing")
        let ada = try await Self.custom(store, "ada@example.com")
        #expect(
            try await store.linkIdentity(Self.google(), to: ada.id, now: 4) == .ownedByAnotherUser,
            "it cannot become someone else's while its id is Gina's")
        #expect(try await store.linkIdentity(Self.google(), to: gina.id, now: 5) == .linked)
        #expect(try await Self.user(store, Self.google()).id == gina.id)
    }

    @Test(arguments: StoreUnderTest.available)
    func deletingAUserFreesTheirIdentities(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let ada = try await Self.custom(store, "ada@example.com")
        #expect(try await store.linkIdentity(Self.google(), to: ada.id, now: 1) == .linked)
        #expect(try await store.deleteUser(id: ada.id, now: Make.now))
        #expect(try await store.identityOwner(provider: "google", subject: "1045") == nil)
        #expect(try await Self.user(store, Self.google()).id == UserID(provider: "google", subject: "1045"))
    }

    @Test(arguments: StoreUnderTest.available)
    func aLinkCodeCarriesItsIdentityToRedemption(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let ada = try await Self.custom(store, "ada@example.com")
        let identity = IdentityRecord(provider: "twitter", subject: "2244994945", email: nil, name: "Grace \"G\"")
        let code = AuthorizationCodeRecord(
            hash: Make.hash(), clientID: "broker-cli", userID: ada.id, redirectURI: "http://127.0.0.1:1/callback",
            codeChallenge: "c", authTime: Make.now, signedInWith: "google", link: identity, expiresAt: Make.now + 60)
        try await store.createAuthorizationCode(code)
        #expect(try await store.redeemAuthorizationCode(hash: code.hash, now: Make.now) == .redeemed(code))
        let plain = AuthorizationCodeRecord(
            hash: Make.hash(), clientID: "broker-cli", userID: ada.id, redirectURI: "http://127.0.0.1:1/callback",
            codeChallenge: "c", authTime: Make.now, signedInWith: "google", expiresAt: Make.now + 60)
        try await store.createAuthorizationCode(plain)
        #expect(try await store.redeemAuthorizationCode(hash: plain.hash, now: Make.now) == .redeemed(plain))
    }

    /// A database written by a broker before linking existed (schema v7): opening it with this one makes every
    /// provider user's identity, so that they sign in as before.
    @Test func upgradingFromVersionSevenGivesEveryProviderUserTheirIdentity() async throws {
        let directory = try TemporaryDirectory.make(prefix: "broker-v7")
        let path = directory.appendingPathComponent("broker.sqlite3").path
        let older = Schema.migrations.filter { $0.version <= 7 }
        // Written the way a v7 broker left it, through SQLite itself (GRDB), not through this broker's store.
        let queue = try DatabaseQueue(path: path)
        try await queue.write { db in
            try db.execute(sql: "CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
            for migration in older {
                try db.execute(sql: migration.sqlite)
                try db.execute(sql: "INSERT INTO grdb_migrations VALUES (?)", arguments: [migration.identifier])
            }
            try db.execute(
                sql: """
                    INSERT INTO users (id, provider, subject, email, name, created_at)
                    VALUES ('google:77', 'google', '77', 'g@example.com', 'G', 100),
                           ('custom:abc', 'custom', 'abc', 'c@example.com', NULL, 200)
                    """)
        }
        try queue.close()
        let store = try SQLiteStore(path: path)
        #expect(try await store.schemaVersion() == Schema.current)
        let google = UserID(provider: "google", subject: "77")
        #expect(
            try await store.identities(user: google).map(\.identity)
                == [IdentityRecord(provider: "google", subject: "77", email: "g@example.com", name: "G")])
        #expect(try await store.identities(user: UserID(provider: .custom, subject: "abc")).isEmpty)
        #expect(
            try await IdentityContract.user(
                store, IdentityRecord(provider: "google", subject: "77", email: nil, name: nil)
            ).id == google)
    }

    /// RT2-5: an unconfirmed address reserves nothing. Released, it leaves its user (with its links and the
    /// sessions it started); a user left with no way in goes; a confirmed address stays where it is.
    @Test(arguments: StoreUnderTest.available)
    func anUnconfirmedAddressIsReleasedAndAConfirmedOneIsNot(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let google = try await Self.user(store, Self.google("held"))
        #expect(
            try await store.addPasswordAccount(user: google.id, email: "held@example.com", passwordHash: "h", now: 1)
                == .added)
        try await store.createEmailLink(
            hash: Array(repeating: 3, count: 32), user: google.id, purpose: EmailLinkPurpose.verify,
            expiresAt: Make.now + 600, now: Make.now)
        let released = try await store.releaseUnverifiedAddress(email: "held@example.com", now: Make.now)
        #expect(released == ReleasedAddress(user: google.id, userDeleted: false))
        #expect(try await store.passwordAccount(email: "held@example.com") == nil)
        #expect(try await store.user(id: google.id) != nil, "the user keeps its Google way in")
        #expect(
            try await store.emailLinkUser(hash: Array(repeating: 3, count: 32), purpose: "verify", now: Make.now) == nil
        )
        #expect(try await store.releaseUnverifiedAddress(email: "held@example.com", now: Make.now) == nil)

        let alone = try await Self.custom(store, "alone@example.com")
        #expect(
            try await store.releaseUnverifiedAddress(email: "alone@example.com", now: Make.now)
                == ReleasedAddress(user: alone.id, userDeleted: true))
        #expect(try await store.user(id: alone.id) == nil, "no way in left: the user is gone")

        let confirmed = Make.user(email: "kept@example.com")
        try await store.createPasswordAccount(
            user: confirmed, email: "kept@example.com", passwordHash: "h", verifiedAt: Make.now)
        #expect(try await store.passwordAccount(email: "kept@example.com")?.emailVerifiedAt == Make.now)
        #expect(try await store.releaseUnverifiedAddress(email: "kept@example.com", now: Make.now) == nil)
        #expect(try await store.passwordAccount(email: "kept@example.com") != nil)
    }
}
