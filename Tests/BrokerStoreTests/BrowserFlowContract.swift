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
}
