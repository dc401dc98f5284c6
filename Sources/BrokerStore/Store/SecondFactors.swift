package import BrokerCore

/// A user's TOTP second factor (issue "A second factor"): the key, sealed by the broker (never stored in the
/// clear), and the last time step whose code was accepted — the replay guard every broker sharing the store
/// reads.
package struct TOTPFactorRecord: Sendable, Hashable {
    package var userID: UserID
    /// The key sealed under the broker's second-factor key, bound to the user id.
    package var sealedKey: String
    package var createdAt: Int64
    /// The newest step whose code signed in; a code of this step or an earlier one is refused.
    package var lastStep: Int64

    package init(userID: UserID, sealedKey: String, createdAt: Int64, lastStep: Int64) {
        self.userID = userID
        self.sealedKey = sealedKey
        self.createdAt = createdAt
        self.lastStep = lastStep
    }
}

/// Second factors and their recovery codes, on both stores (schema v25). Recovery codes are kept as keyed
/// hashes (``RecoveryCodeHasher`` on the server), each spent once.
package protocol SecondFactorStore: Sendable {
    func totpFactor(user: UserID) async throws -> TOTPFactorRecord?

    /// Stores the user's TOTP factor and its recovery codes (replacing any codes) in one transaction;
    /// ``StoreError/conflict(_:)`` when the user has one already.
    func addTOTPFactor(_ factor: TOTPFactorRecord, recoveryCodes: [[UInt8]], now: Int64) async throws

    /// Removes the factor and every recovery code in one transaction; `false` when there was no factor.
    func removeTOTPFactor(user: UserID) async throws -> Bool

    /// Recovery by mail, in one transaction: spends the ``EmailLinkPurpose/secondFactorRecovery`` link
    /// `linkHash` (and the user's other unused ones), removes the user's factor and recovery codes, and ends every
    /// session of the user. `nil` (nothing changed) when the link is unknown, spent or expired.
    func removeTOTPFactor(linkHash: [UInt8], now: Int64) async throws -> UserID?

    /// Records that a code of `step` signed in, as one conditional write: only when no code of this step or a
    /// later one did (`false` then — a replay, or the same code racing on another broker).
    func recordTOTPStep(user: UserID, step: Int64) async throws -> Bool

    /// Replaces the user's recovery codes by `hashes` (all unused).
    func replaceRecoveryCodes(user: UserID, hashes: [[UInt8]], now: Int64) async throws

    /// Spends one unused recovery code of the user's, as one conditional write; `false` when it is not one
    /// (or was spent, here or on another broker).
    func spendRecoveryCode(user: UserID, hash: [UInt8], now: Int64) async throws -> Bool

    /// How many of the user's recovery codes are unused.
    func recoveryCodesLeft(user: UserID) async throws -> Int
}
