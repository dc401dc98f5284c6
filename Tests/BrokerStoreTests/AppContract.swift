import BrokerCore
import BrokerStore
import BrokerTesting
import Foundation
import Testing

/// The ``AppStore`` half of the contract (schema v13): apps, browser sessions, consents and app codes, the same
/// on SQLite and PostgreSQL.
@Suite("Store contract: apps (the OpenID Provider)")
struct AppContract {
    static func app(_ clientID: String = "wiki", secret: String? = "keyed-hash") -> AppRecord {
        AppRecord(
            clientID: clientID, secretHash: secret,
            redirectURIs: ["https://wiki.example/cb", "https://wiki.example/2"],
            postLogoutRedirectURIs: ["https://wiki.example/bye"], backchannelLogoutURI: "https://wiki.example/bc",
            firstParty: true, idTokenAlgorithm: "ES256", scopes: ["wiki:edit"], createdAt: Make.now)
    }

    @Test(arguments: StoreUnderTest.available)
    func appsAreCreatedOnceListedAndRemovedWithTheSessionsTheyStarted(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        try await store.createApp(Self.app())
        try await store.createApp(Self.app("phone", secret: nil))
        await #expect(throws: StoreError.self) { try await store.createApp(Self.app()) }
        #expect(try await store.app(clientID: "wiki") == Self.app(), "every field round-trips")
        #expect(try await store.app(clientID: "phone")?.isPublic == true)
        #expect(try await store.apps().map(\.clientID) == ["phone", "wiki"])
        #expect(try await store.app(clientID: "nobody") == nil)

        let (user, cliSession, _) = try await Make.signedIn(store)
        var appSession = Make.session(for: user)
        appSession.clientID = "wiki"
        try await store.createSession(appSession, firstToken: Make.token(Make.hash(), session: appSession.id))
        try await store.recordConsent(user: user.id, clientID: "wiki", scopes: ["openid"], now: Make.now)
        #expect(try await store.deleteApp(clientID: "wiki", now: Make.now + 1) == [appSession.id])
        #expect(try await store.session(id: appSession.id)?.revokedAt == Make.now + 1)
        #expect(try await store.session(id: cliSession.id)?.revokedAt == nil, "other clients' sessions stay")
        #expect(try await store.consent(user: user.id, clientID: "wiki") == nil, "its consents go with it")
        #expect(try await store.deleteApp(clientID: "wiki", now: Make.now) == nil)
    }

    @Test(arguments: StoreUnderTest.available)
    func browserSessionsAreFoundByTheirCookieWhileLive(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        let cookie = Make.hash()
        let session = BrowserSessionRecord(
            id: "b-1", userID: user.id, signedInWith: "google", authTime: Make.now, expiresAt: Make.now + 600)
        try await store.createBrowserSession(session, cookieHash: cookie)
        #expect(try await store.browserSession(cookieHash: cookie, now: Make.now) == session)
        #expect(try await store.browserSession(cookieHash: Make.hash(), now: Make.now) == nil)
        #expect(try await store.browserSession(cookieHash: cookie, now: Make.now + 600) == nil, "expired")
        #expect(try await store.browserSessions(user: user.id).map(\.id) == ["b-1"])

        #expect(try await store.setUserDisabled(id: user.id, disabled: true, now: Make.now))
        #expect(try await store.browserSession(cookieHash: cookie, now: Make.now) == nil, "a disabled user's")
        #expect(try await store.setUserDisabled(id: user.id, disabled: false, now: Make.now))
        #expect(
            try await store.browserSession(cookieHash: cookie, now: Make.now) == nil,
            "disabling ended it (and its apps were told): enabling the user does not bring it back")
        #expect(try await store.revokeBrowserSession(id: "b-1", now: Make.now) == false, "already ended")

        let live = Make.hash()
        var second = session
        second.id = "b-1a"
        try await store.createBrowserSession(second, cookieHash: live)
        #expect(try await store.revokeBrowserSession(id: "b-1a", now: Make.now))
        #expect(try await store.revokeBrowserSession(id: "b-1a", now: Make.now) == false, "once")
        #expect(try await store.browserSession(cookieHash: live, now: Make.now) == nil)
        #expect(try await store.browserSessions(user: nil).first?.revokedAt == Make.now)

        // Revoking a user's sessions ends their browser sessions too.
        let other = Make.hash()
        try await store.createBrowserSession(
            BrowserSessionRecord(
                id: "b-2", userID: user.id, signedInWith: .custom, authTime: Make.now, expiresAt: Make.now + 600),
            cookieHash: other)
        _ = try await store.revokeSessions(user: user.id, now: Make.now)
        #expect(try await store.browserSession(cookieHash: other, now: Make.now) == nil)
    }

    @Test(arguments: StoreUnderTest.available)
    func consentIsRememberedPerUserAndAppAndReplaced(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        try await store.createApp(Self.app())
        let user = try await store.providerUser(Make.user("google"))
        #expect(try await store.consent(user: user.id, clientID: "wiki") == nil)
        try await store.recordConsent(user: user.id, clientID: "wiki", scopes: ["openid", "email"], now: Make.now)
        #expect(try await store.consent(user: user.id, clientID: "wiki") == ["email", "openid"])
        try await store.recordConsent(user: user.id, clientID: "wiki", scopes: ["profile"], now: Make.now)
        #expect(try await store.consent(user: user.id, clientID: "wiki") == ["profile"])
    }

    /// The account page's "Apps you allowed": each app's consent listed, and taking it back forgets it, drops the
    /// app's codes for that user and ends its sessions for that user — nobody else's, and no other app's.
    @Test(arguments: StoreUnderTest.available)
    func aConsentIsListedAndTakenBackWithTheAppsCodesAndSessionsForThatUserOnly(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        try await store.createApp(Self.app())
        try await store.createApp(Self.app("notes"))
        let (user, cliSession, _) = try await Make.signedIn(store)
        let other = try await store.providerUser(Make.user("google"))
        #expect(try await store.consents(user: user.id).isEmpty)
        try await store.recordConsent(user: user.id, clientID: "wiki", scopes: ["openid", "email"], now: Make.now)
        try await store.recordConsent(user: user.id, clientID: "notes", scopes: ["openid"], now: Make.now + 1)
        try await store.recordConsent(user: other.id, clientID: "wiki", scopes: ["openid"], now: Make.now)
        #expect(
            try await store.consents(user: user.id) == [
                ConsentRecord(clientID: "notes", scopes: ["openid"], grantedAt: Make.now + 1),
                ConsentRecord(clientID: "wiki", scopes: ["email", "openid"], grantedAt: Make.now),
            ])
        var sessions: [String: SessionRecord] = [:]
        for (name, owner, client) in [("mine", user, "wiki"), ("notes", user, "notes"), ("theirs", other, "wiki")] {
            var session = Make.session(for: owner)
            session.clientID = client
            try await store.createSession(session, firstToken: Make.token(Make.hash(), session: session.id))
            sessions[name] = session
        }
        let codeHash = Make.hash()
        try await store.createAuthorizationCode(
            AuthorizationCodeRecord(
                hash: codeHash, clientID: "wiki", userID: user.id, redirectURI: "https://wiki.example/cb",
                codeChallenge: nil, scope: "openid", nonce: nil, authTime: Make.now, signedInWith: "google",
                browserSession: nil, expiresAt: Make.now + 60))

        let ended = try await store.revokeConsent(user: user.id, clientID: "wiki", now: Make.now + 5)
        #expect(ended == [try #require(sessions["mine"]).id])
        #expect(try await store.consent(user: user.id, clientID: "wiki") == nil, "the next sign-in asks again")
        #expect(try await store.consents(user: user.id).map(\.clientID) == ["notes"])
        #expect(try await store.consent(user: other.id, clientID: "wiki") == ["openid"], "another user's stays")
        #expect(try await store.session(id: try #require(sessions["mine"]).id)?.revokedAt == Make.now + 5)
        #expect(try await store.session(id: try #require(sessions["notes"]).id)?.revokedAt == nil)
        #expect(try await store.session(id: try #require(sessions["theirs"]).id)?.revokedAt == nil)
        #expect(try await store.session(id: cliSession.id)?.revokedAt == nil, "the CLI's session is not the app's")
        #expect(try await store.redeemAuthorizationCode(hash: codeHash, now: Make.now + 6) == .unknown)
        #expect(try await store.revokeConsent(user: user.id, clientID: "wiki", now: Make.now + 7).isEmpty)
    }

    @Test(arguments: StoreUnderTest.available)
    func anAppCodeIsRedeemedOnceEvenUnderRacesAndItsReuseNamesTheSession(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        try await store.createApp(Self.app())
        let user = try await store.providerUser(Make.user("google"))
        try await Self.browser(store, "b-1", of: user)
        let hash = Make.hash()
        let code = AuthorizationCodeRecord(
            hash: hash, clientID: "wiki", userID: user.id, redirectURI: "https://wiki.example/cb",
            codeChallenge: nil, scope: "openid email", nonce: "n", authTime: Make.now - 5, signedInWith: "google",
            browserSession: "b-1", expiresAt: Make.now + 60)
        try await store.createAuthorizationCode(code)
        let outcomes = try await withThrowingTaskGroup(of: CodeRedemption.self) { group in
            for _ in 0..<20 { group.addTask { try await store.redeemAuthorizationCode(hash: hash, now: Make.now) } }
            return try await group.reduce(into: [CodeRedemption]()) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 == .redeemed(code) }.count == 1, "\(outcomes)")
        #expect(outcomes.filter { $0 == .reused(session: nil) }.count == 19)
        try await store.attachSession("s-1", toCode: hash, now: Make.now)
        #expect(try await store.redeemAuthorizationCode(hash: hash, now: Make.now) == .reused(session: "s-1"))
        #expect(try await store.redeemAuthorizationCode(hash: Make.hash(), now: Make.now) == .unknown)

        let late = Make.hash()
        var expiring = code
        expiring.hash = late
        try await store.createAuthorizationCode(expiring)
        #expect(try await store.redeemAuthorizationCode(hash: late, now: Make.now + 60) == .expired)
    }

    /// RT3-5: a code issued before its browser session ended (end-session, reset, `sessions revoke`) was still
    /// redeemed after, and the app session it started outlived the browser session. The redemption now decides,
    /// in its transaction, that the browser session still stands; and a session attached after it ended is
    /// revoked with it.
    @Test(.bug(id: "RT3-5"), arguments: StoreUnderTest.available)
    func aCodeOfAnEndedBrowserSessionStartsNothing(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        try await store.createApp(Self.app())
        let user = try await store.providerUser(Make.user("google"))
        func code(_ browser: String) async throws -> [UInt8] {
            let hash = Make.hash()
            try await store.createAuthorizationCode(
                AuthorizationCodeRecord(
                    hash: hash, clientID: "wiki", userID: user.id, redirectURI: "https://wiki.example/cb",
                    codeChallenge: nil, scope: "openid", nonce: nil, authTime: Make.now, signedInWith: "google",
                    browserSession: browser, expiresAt: Make.now + 60))
            return hash
        }
        try await Self.browser(store, "ended", of: user)
        let issued = try await code("ended")
        #expect(try await store.revokeBrowserSession(id: "ended", now: Make.now))
        #expect(try await store.redeemAuthorizationCode(hash: issued, now: Make.now) == .browserSessionEnded)
        #expect(try await store.redeemAuthorizationCode(hash: issued, now: Make.now) == .reused(session: nil), "spent")
        #expect(
            try await store.redeemAuthorizationCode(hash: try await code("never-was"), now: Make.now)
                == .browserSessionEnded)

        // Ended between the redemption and the session's start: the session goes with it.
        try await Self.browser(store, "racing", of: user)
        let racing = try await code("racing")
        guard case .redeemed = try await store.redeemAuthorizationCode(hash: racing, now: Make.now) else {
            Issue.record("a code of a live browser session is redeemed")
            return
        }
        #expect(try await store.revokeBrowserSession(id: "racing", now: Make.now))
        var session = Make.session(for: user)
        session.clientID = "wiki"
        try await store.createSession(session, firstToken: Make.token(Make.hash(), session: session.id))
        try await store.attachSession(session.id, toCode: racing, now: Make.now)
        #expect(try await store.session(id: session.id)?.revokedAt != nil)
    }

    /// Introspection reads a refresh token without spending it: live, then spent once rotated.
    @Test(arguments: StoreUnderTest.available)
    func aRefreshTokensStateIsReadWithoutSpendingIt(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let (_, session, token) = try await Make.signedIn(store)
        let read = try #require(try await store.refreshToken(hash: token))
        #expect(read.token.sessionID == session.id && read.token.expiresAt == Make.now + 3600 && !read.spent)
        #expect(try await store.refreshToken(hash: token)?.spent == false, "reading spends nothing")
        _ = try await store.rotateRefreshToken(
            hash: token, nextHash: Make.hash(), nextExpiresAt: Make.now + 7200, now: Make.now)
        #expect(try await store.refreshToken(hash: token)?.spent == true)
        #expect(try await store.refreshToken(hash: Make.hash()) == nil)
    }

    /// An app signs in through a browser session: a code of that session, redeemed into a session of the app.
    static func signIn(
        _ store: any Store, _ user: UserRecord, app: String, through browser: String
    ) async throws -> String {
        let hash = Make.hash()
        try await store.createAuthorizationCode(
            AuthorizationCodeRecord(
                hash: hash, clientID: app, userID: user.id, redirectURI: "https://\(app).example/cb",
                codeChallenge: nil,
                scope: "openid", nonce: nil, authTime: Make.now, signedInWith: "google", browserSession: browser,
                expiresAt: Make.now + 60))
        _ = try await store.redeemAuthorizationCode(hash: hash, now: Make.now)
        var session = Make.session(for: user)
        session.clientID = app
        try await store.createSession(session, firstToken: Make.token(Make.hash(), session: session.id))
        try await store.attachSession(session.id, toCode: hash, now: Make.now)
        return session.id
    }

    static func browser(_ store: any Store, _ id: String, of user: UserRecord) async throws {
        try await store.createBrowserSession(
            BrowserSessionRecord(
                id: id, userID: user.id, signedInWith: "google", authTime: Make.now, expiresAt: Make.now + 600),
            cookieHash: Make.hash())
    }

    /// Back-channel logout's queue (issue "Logout everywhere…"): written with the end of the browser session,
    /// one delivery per app with a `backchannel_logout_uri`, claimed under a lease, retried, finished — the same
    /// on both stores, and whoever ends the session (logout, revocation, deletion) queues it.
    @Test(arguments: StoreUnderTest.available)
    func endingABrowserSessionQueuesOneLogoutPerAppThatSignedInThroughIt(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        try await store.createApp(Self.app())
        var plain = Self.app("plain")
        plain.backchannelLogoutURI = nil
        try await store.createApp(plain)
        let ada = try await store.providerUser(Make.user("google"))
        try await Self.browser(store, "b-1", of: ada)
        try await Self.browser(store, "b-2", of: ada)
        let first = try await Self.signIn(store, ada, app: "wiki", through: "b-1")
        let second = try await Self.signIn(store, ada, app: "wiki", through: "b-1")
        let other = try await Self.signIn(store, ada, app: "plain", through: "b-1")
        _ = try await Self.signIn(store, ada, app: "wiki", through: "b-2")

        #expect(try await store.claimLogoutDeliveries(now: Make.now, limit: 10) == [], "nothing ended yet")
        #expect(try await store.endBrowserSession(id: "b-1", now: Make.now) == [first, second, other].sorted())
        #expect(try await store.pendingLogoutDeliveries() == 1, "one per app, none for an app without a URI")
        let claimed = try await store.claimLogoutDeliveries(now: Make.now, limit: 10)
        let delivery = try #require(claimed.first)
        #expect(claimed.count == 1)
        #expect(delivery.clientID == "wiki" && delivery.sid == "b-1" && delivery.subject == ada.id.description)
        #expect(delivery.uri == "https://wiki.example/bc" && delivery.attempts == 0)
        #expect(delivery.giveUpAt == Make.now + LogoutDelivery.retryFor)
        #expect(try await store.claimLogoutDeliveries(now: Make.now, limit: 10) == [], "leased to the first claimer")
        let again = try await store.claimLogoutDeliveries(now: Make.now + LogoutDelivery.lease, limit: 10)
        #expect(again.map(\.id) == [delivery.id] && again.first?.attempts == 1, "the lease lapsed: taken again")
        try await store.retryLogoutDelivery(id: delivery.id, at: Make.now + 100)
        #expect(try await store.claimLogoutDeliveries(now: Make.now + 99, limit: 10) == [])
        #expect(try await store.claimLogoutDeliveries(now: Make.now + 100, limit: 10).map(\.id) == [delivery.id])
        try await store.finishLogoutDelivery(id: delivery.id)
        #expect(try await store.pendingLogoutDeliveries() == 0)

        #expect(try await store.endBrowserSession(id: "b-1", now: Make.now + 1) == [], "already ended")
        #expect(try await store.pendingLogoutDeliveries() == 0, "an ended session is not logged out twice")
        _ = try await store.revokeSessions(user: ada.id, now: Make.now + 2)
        let revoked = try await store.claimLogoutDeliveries(now: Make.now + 2, limit: 10)
        #expect(revoked.map(\.sid) == ["b-2"], "revoking the user's sessions logs out b-2")

        // A deleted user is logged out of the apps too (the subject outlives the account).
        let bob = try await store.providerUser(Make.user("google"))
        try await Self.browser(store, "b-3", of: bob)
        _ = try await Self.signIn(store, bob, app: "wiki", through: "b-3")
        #expect(try await store.deleteUser(id: bob.id, now: Make.now + 3))
        let deleted = try await store.claimLogoutDeliveries(now: Make.now + 3, limit: 10)
        #expect(deleted.map(\.subject) == [bob.id.description] && deleted.map(\.sid) == ["b-3"])

        // Disabling and unlinking end browser sessions too.
        let cy = try await store.providerUser(Make.user("google"))
        try await Self.browser(store, "b-4", of: cy)
        _ = try await Self.signIn(store, cy, app: "wiki", through: "b-4")
        #expect(try await store.setUserDisabled(id: cy.id, disabled: true, now: Make.now + 4))
        #expect(try await store.browserSessions(user: cy.id).first?.revokedAt == Make.now + 4)
        #expect(try await store.claimLogoutDeliveries(now: Make.now + 4, limit: 10).map(\.sid) == ["b-4"])

        // An app removed takes its queued logouts with it.
        let dee = try await store.providerUser(Make.user("google"))
        try await Self.browser(store, "b-5", of: dee)
        _ = try await Self.signIn(store, dee, app: "wiki", through: "b-5")
        #expect(try await store.revokeBrowserSession(id: "b-5", now: Make.now + 5))
        #expect(try await store.pendingLogoutDeliveries() == 4)
        _ = try await store.deleteApp(clientID: "wiki", now: Make.now + 5)
        #expect(try await store.pendingLogoutDeliveries() == 0)
    }

    /// A pushed authorization request (RFC 9126) is taken once, by whichever broker asks first, until it expires.
    @Test(arguments: StoreUnderTest.available)
    func aPushedRequestIsTakenOnceBeforeItExpires(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        try await store.createApp(Self.app())
        let hash = Make.hash()
        let record = PushedRequestRecord(clientID: "wiki", parameters: "scope=openid&state=s", expiresAt: Make.now + 60)
        try await store.createPushedRequest(record, hash: hash)
        let taken = try await withThrowingTaskGroup(of: PushedRequestRecord?.self) { group in
            for _ in 0..<10 { group.addTask { try await store.takePushedRequest(hash: hash, now: Make.now) } }
            return try await group.reduce(into: [PushedRequestRecord]()) { if let found = $1 { $0.append(found) } }
        }
        #expect(taken == [record], "exactly one of ten concurrent takes")
        #expect(try await store.takePushedRequest(hash: hash, now: Make.now) == nil)

        let late = Make.hash()
        try await store.createPushedRequest(record, hash: late)
        #expect(try await store.takePushedRequest(hash: late, now: Make.now + 60) == nil, "expired")
        #expect(try await store.takePushedRequest(hash: late, now: Make.now) == nil, "and gone")
    }

    /// DPoP (RFC 9449): a bound session's refresh token is spent only with a proof by its key; without it nothing
    /// is spent and nothing is revoked (a thief without the key can neither use nor burn it), on both stores.
    @Test(arguments: StoreUnderTest.available)
    func aBoundSessionsRefreshTokenIsSpentOnlyWithItsKey(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        var session = Make.session(for: user)
        session.dpopJKT = "jkt-1"
        let token = Make.hash()
        try await store.createSession(session, firstToken: Make.token(token, session: session.id))
        #expect(try await store.sessions(user: user.id).first?.dpopJKT == "jkt-1", "listed with its key")
        for wrong in [nil, "jkt-2"] as [String?] {
            let refused = try await store.rotateRefreshToken(
                hash: token, nextHash: Make.hash(), nextExpiresAt: Make.now + 7200, now: Make.now, proofKey: wrong)
            #expect(refused == .boundToAnotherKey, "\(wrong ?? "no key")")
        }
        #expect(try await store.refreshToken(hash: token)?.spent == false, "nothing was spent")
        let rotated = try await store.rotateRefreshToken(
            hash: token, nextHash: Make.hash(), nextExpiresAt: Make.now + 7200, now: Make.now, proofKey: "jkt-1")
        guard case .rotated(let view) = rotated else {
            Issue.record("not rotated: \(rotated)")
            return
        }
        #expect(view.session.dpopJKT == "jkt-1")
        // The spent token replayed without the key: refused, and the session is not ended by it.
        #expect(
            try await store.rotateRefreshToken(
                hash: token, nextHash: Make.hash(), nextExpiresAt: Make.now + 7200, now: Make.now, proofKey: nil)
                == .boundToAnotherKey)
        #expect(try await store.session(id: session.id)?.revokedAt == nil)
        // With the key it is a reuse, as ever: the session ends.
        #expect(
            try await store.rotateRefreshToken(
                hash: token, nextHash: Make.hash(), nextExpiresAt: Make.now + 7200, now: Make.now, proofKey: "jkt-1")
                == .reused(sessionID: session.id))
        #expect(try await store.session(id: session.id)?.revokedAt != nil)
    }
}
