import BrokerCore
import BrokerCrypto
import BrokerStore
import Testing

/// The store contract for second factors (schema v25): written against the ``Store`` protocol alone, run
/// against each store in ``StoreUnderTest``.
@Suite("Store contract: second factors")
struct SecondFactorContract {
    @Test(arguments: StoreUnderTest.available)
    func aFactorIsAddedOnceItsStepsOnlyRiseAndItGoesWithItsCodes(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await IdentityContract.custom(store, "mfa@example.com")
        let other = try await IdentityContract.custom(store, "other@example.com")
        #expect(try await store.totpFactor(user: user.id) == nil)
        let factor = TOTPFactorRecord(userID: user.id, sealedKey: "sealed-key", createdAt: 10, lastStep: 100)
        let codes = (0..<3).map { Digest.sha256("code \($0)") }
        try await store.addTOTPFactor(factor, recoveryCodes: codes, now: 10)
        await #expect(throws: StoreError.self, "one factor per account") {
            try await store.addTOTPFactor(factor, recoveryCodes: [], now: 11)
        }
        #expect(try await store.totpFactor(user: user.id) == factor, "the first one stands")
        #expect(try await store.recoveryCodesLeft(user: user.id) == 3)

        #expect(try await !store.recordTOTPStep(user: user.id, step: 100), "the step that confirmed it")
        #expect(try await store.recordTOTPStep(user: user.id, step: 101))
        #expect(try await !store.recordTOTPStep(user: user.id, step: 101), "a code once")
        #expect(try await !store.recordTOTPStep(user: user.id, step: 99), "never an earlier step")
        #expect(try await !store.recordTOTPStep(user: other.id, step: 500), "no factor, nothing recorded")
        #expect(try await store.totpFactor(user: user.id)?.lastStep == 101)

        #expect(try await !store.spendRecoveryCode(user: other.id, hash: codes[0], now: 20), "another user's code")
        #expect(try await store.spendRecoveryCode(user: user.id, hash: codes[0], now: 20))
        #expect(try await !store.spendRecoveryCode(user: user.id, hash: codes[0], now: 21), "once")
        #expect(try await store.recoveryCodesLeft(user: user.id) == 2)
        let fresh = [Digest.sha256("fresh")]
        try await store.replaceRecoveryCodes(user: user.id, hashes: fresh, now: 30)
        #expect(try await !store.spendRecoveryCode(user: user.id, hash: codes[1], now: 31), "the old codes are gone")
        #expect(try await store.recoveryCodesLeft(user: user.id) == 1)

        #expect(try await store.removeTOTPFactor(user: user.id))
        #expect(try await !store.removeTOTPFactor(user: user.id))
        #expect(try await store.totpFactor(user: user.id) == nil)
        #expect(try await store.recoveryCodesLeft(user: user.id) == 0, "its codes went with it")

        try await store.addTOTPFactor(factor, recoveryCodes: codes, now: 40)
        #expect(try await store.deleteUser(id: user.id, now: 50))
        #expect(try await store.totpFactor(user: user.id) == nil, "a deleted account takes its factor along")
        #expect(try await store.recoveryCodesLeft(user: user.id) == 0)
    }

    /// Recovery by mail: the link is spent, the factor and codes go and every session ends, in one transaction; an
    /// unknown, expired, spent or other-purpose link changes nothing; only the newest link works.
    @Test(arguments: StoreUnderTest.available)
    func aRecoveryLinkRemovesTheFactorOnceAndEndsEverySession(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = try await IdentityContract.custom(store, "lost@example.com")
        let factor = TOTPFactorRecord(userID: user.id, sealedKey: "sealed", createdAt: 10, lastStep: 1)
        try await store.addTOTPFactor(factor, recoveryCodes: [Digest.sha256("c")], now: 10)
        let session = Make.session(for: user, signedInWith: .customOTP)
        try await store.createSession(session, firstToken: Make.token(Make.hash(), session: session.id))
        let (old, link, reset) = (Make.hash(), Make.hash(), Make.hash())
        let purpose = EmailLinkPurpose.secondFactorRecovery
        try await store.createEmailLink(
            hash: old, user: user.id, purpose: purpose, expiresAt: Make.now + 1800, now: Make.now)
        try await store.createEmailLink(
            hash: link, user: user.id, purpose: purpose, expiresAt: Make.now + 1800, now: Make.now)
        try await store.createEmailLink(
            hash: reset, user: user.id, purpose: EmailLinkPurpose.reset, expiresAt: Make.now + 1800, now: Make.now)

        #expect(try await store.removeTOTPFactor(linkHash: Make.hash(), now: Make.now) == nil, "unknown")
        #expect(try await store.removeTOTPFactor(linkHash: old, now: Make.now) == nil, "only the newest works")
        #expect(try await store.removeTOTPFactor(linkHash: reset, now: Make.now) == nil, "a reset link is no such link")
        #expect(try await store.removeTOTPFactor(linkHash: link, now: Make.now + 1800) == nil, "expired")
        #expect(try await store.totpFactor(user: user.id) == factor, "nothing changed so far")
        #expect(try await store.sessions(user: user.id).allSatisfy { $0.revokedAt == nil })

        #expect(try await store.removeTOTPFactor(linkHash: link, now: Make.now + 60) == user.id)
        #expect(try await store.totpFactor(user: user.id) == nil)
        #expect(try await store.recoveryCodesLeft(user: user.id) == 0)
        #expect(try await store.sessions(user: user.id).allSatisfy { $0.revokedAt != nil }, "every session ended")
        #expect(try await store.removeTOTPFactor(linkHash: link, now: Make.now + 61) == nil, "once")
        #expect(
            try await store.emailLinkUser(hash: reset, purpose: EmailLinkPurpose.reset, now: Make.now + 61) != nil,
            "another purpose's link is untouched")
    }
}
