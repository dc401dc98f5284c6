import BrokerCore
import BrokerStore
import Testing

/// The store contract for the browser flow's one-time codes and state markers: written against the ``Store`` protocol alone, run against each store
/// in ``StoreUnderTest``.
@Suite("Store contract: the browser flow's one-time codes and state markers")
struct BrowserFlowContract {
    @Test(arguments: StoreUnderTest.available)
    func codeIsRedeemedOnceAndItsReuseNamesTheSession(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        let code = AuthorizationCodeRecord(
            hash: Make.hash(), clientID: "broker-cli", userID: user.id, redirectURI: "http://127.0.0.1:5/cb",
            codeChallenge: "challenge", authTime: Make.now, signedInWith: "google",
            claims: #"{"id_token":{"email":null}}"#, expiresAt: Make.now + 60)
        try await store.createAuthorizationCode(code)
        #expect(try await store.redeemAuthorizationCode(hash: code.hash, now: Make.now) == .redeemed(code))
        #expect(try await store.redeemAuthorizationCode(hash: code.hash, now: Make.now) == .reused(session: nil))
        try await store.attachSession("session-1", toCode: code.hash, now: Make.now)
        #expect(
            try await store.redeemAuthorizationCode(hash: code.hash, now: Make.now) == .reused(session: "session-1"))
        #expect(try await store.redeemAuthorizationCode(hash: Make.hash(), now: Make.now) == .unknown)
    }

    @Test(arguments: StoreUnderTest.available)
    func concurrentRedemptionsOfOneCodeRedeemOnce(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        let code = AuthorizationCodeRecord(
            hash: Make.hash(), clientID: "broker-cli", userID: user.id, redirectURI: "http://127.0.0.1:5/cb",
            codeChallenge: "c", authTime: Make.now, signedInWith: "google", expiresAt: Make.now + 60)
        try await store.createAuthorizationCode(code)
        let outcomes = try await withThrowingTaskGroup(of: CodeRedemption.self) { group in
            for _ in 0..<30 {
                group.addTask { try await store.redeemAuthorizationCode(hash: code.hash, now: Make.now) }
            }
            return try await group.reduce(into: [CodeRedemption]()) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 == .redeemed(code) }.count == 1)
        #expect(outcomes.filter { $0 == .reused(session: nil) }.count == 29)
    }

    /// One record for the CLI and apps (schema v17): a CLI code issued in no browser session is redeemed, and the
    /// session it starts is not taken for one whose browser session ended (RT3-5 applies to codes of a browser
    /// session only); an expired code is told apart and starts nothing; an app's removal takes its codes along.
    @Test(arguments: StoreUnderTest.available)
    func aCodeWithoutABrowserSessionStartsALastingSessionAndAnAppsCodesGoWithIt(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await store.providerUser(Make.user("google"))
        let code = AuthorizationCodeRecord(
            hash: Make.hash(), clientID: "broker-cli", userID: user.id, redirectURI: "http://127.0.0.1:5/callback",
            codeChallenge: "c", authTime: Make.now, signedInWith: "google", expiresAt: Make.now + 60)
        try await store.createAuthorizationCode(code)
        #expect(try await store.redeemAuthorizationCode(hash: code.hash, now: Make.now) == .redeemed(code))
        var session = Make.session(for: user)
        session.clientID = "broker-cli"
        try await store.createSession(session, firstToken: Make.token(Make.hash(), session: session.id))
        try await store.attachSession(session.id, toCode: code.hash, now: Make.now)
        #expect(try await store.session(id: session.id)?.revokedAt == nil, "no browser session to have ended")
        #expect(try await store.redeemAuthorizationCode(hash: code.hash, now: Make.now) == .reused(session: session.id))

        var late = code
        late.hash = Make.hash()
        try await store.createAuthorizationCode(late)
        #expect(try await store.redeemAuthorizationCode(hash: late.hash, now: Make.now + 60) == .expired)
        #expect(try await store.redeemAuthorizationCode(hash: late.hash, now: Make.now + 61) == .expired, "unspent")

        try await store.createApp(
            AppRecord(clientID: "wiki", secretHash: nil, redirectURIs: ["https://wiki.example/cb"], createdAt: Make.now)
        )
        var appCode = code
        (appCode.hash, appCode.clientID, appCode.redirectURI) = (Make.hash(), "wiki", "https://wiki.example/cb")
        try await store.createAuthorizationCode(appCode)
        #expect(try await store.deleteApp(clientID: "wiki", now: Make.now) != nil)
        #expect(try await store.redeemAuthorizationCode(hash: appCode.hash, now: Make.now) == .unknown)
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
        // Many markers at once (SQLite writes those that arrive together in one transaction): each caller learns of
        // its own, a duplicate in the same moment loses, and every one is spent afterwards.
        let markers = (0..<40).map { "m3-\($0 % 20)" }
        let fresh = try await withThrowingTaskGroup(of: (String, Bool).self) { group in
            for marker in markers {
                group.addTask { (marker, try await store.spendStateMarker(marker, expiresAt: Make.now + 600)) }
            }
            return try await group.reduce(into: [String: Int]()) { $0[$1.0, default: 0] += $1.1 ? 1 : 0 }
        }
        #expect(fresh.count == 20 && fresh.values.allSatisfy { $0 == 1 }, "\(fresh)")
        for marker in Set(markers) { #expect(try await store.isStateMarkerSpent(marker)) }
        #expect(try await !store.isStateMarkerSpent("m3-unknown"))
    }
}
