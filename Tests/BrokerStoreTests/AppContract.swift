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
        #expect(try await store.browserSession(cookieHash: cookie, now: Make.now) != nil)

        #expect(try await store.revokeBrowserSession(id: "b-1", now: Make.now))
        #expect(try await store.revokeBrowserSession(id: "b-1", now: Make.now) == false, "once")
        #expect(try await store.browserSession(cookieHash: cookie, now: Make.now) == nil)
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

    @Test(arguments: StoreUnderTest.available)
    func anAppCodeIsRedeemedOnceEvenUnderRacesAndItsReuseNamesTheSession(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        try await store.createApp(Self.app())
        let user = try await store.providerUser(Make.user("google"))
        let hash = Make.hash()
        let code = AppCodeRecord(
            hash: hash, clientID: "wiki", userID: user.id, redirectURI: "https://wiki.example/cb",
            codeChallenge: nil, scope: "openid email", nonce: "n", authTime: Make.now - 5, signedInWith: "google",
            browserSession: "b-1", expiresAt: Make.now + 60)
        try await store.createAppCode(code)
        let outcomes = try await withThrowingTaskGroup(of: AppCodeRedemption.self) { group in
            for _ in 0..<20 { group.addTask { try await store.redeemAppCode(hash: hash, now: Make.now) } }
            return try await group.reduce(into: [AppCodeRedemption]()) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 == .redeemed(code) }.count == 1, "\(outcomes)")
        #expect(outcomes.filter { $0 == .reused(session: nil) }.count == 19)
        try await store.attachSession("s-1", toAppCode: hash)
        #expect(try await store.redeemAppCode(hash: hash, now: Make.now) == .reused(session: "s-1"))
        #expect(try await store.redeemAppCode(hash: Make.hash(), now: Make.now) == .unknown)

        let late = Make.hash()
        var expiring = code
        expiring.hash = late
        try await store.createAppCode(expiring)
        #expect(try await store.redeemAppCode(hash: late, now: Make.now + 60) == .unknown, "expired")
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
}
