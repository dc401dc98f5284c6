package import BrokerCore

/// A WebAuthn credential (issue "Passkeys"): what the broker keeps to check a passkey's later sign-ins.
/// Nothing here is secret — a public key, a counter — but it decides who signs in, so it is changed only by a
/// ceremony the person completed.
package struct PasskeyRecord: Sendable, Hashable {
    /// The credential id, base64url (at most 1,023 bytes before encoding).
    package var id: String
    package var userID: UserID
    /// The COSE_Key bytes as the authenticator wrote them (stored as hex).
    package var publicKey: [UInt8]
    /// The COSE algorithm (-7 ES256, -8 EdDSA, -257 RS256).
    package var algorithm: Int
    /// The last signature counter seen (0 for synced passkeys, which never count).
    package var signCount: Int64
    /// What the browser said the authenticator speaks (`internal`, `hybrid`, `usb`, …).
    package var transports: [String]
    package var backupEligible: Bool
    package var backedUp: Bool
    /// The authenticator model's AAGUID, as a UUID string (all zeros when it does not say).
    package var aaguid: String
    /// The person's name for it ("Laptop", "Phone"); made up from the time when not given.
    package var name: String
    package var createdAt: Int64
    package var lastUsedAt: Int64?

    package init(
        id: String, userID: UserID, publicKey: [UInt8], algorithm: Int, signCount: Int64, transports: [String],
        backupEligible: Bool, backedUp: Bool, aaguid: String, name: String, createdAt: Int64, lastUsedAt: Int64? = nil
    ) {
        self.id = id
        self.userID = userID
        self.publicKey = publicKey
        self.algorithm = algorithm
        self.signCount = signCount
        self.transports = transports
        self.backupEligible = backupEligible
        self.backedUp = backedUp
        self.aaguid = aaguid
        self.name = name
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
    }

    /// Transports as stored: space-separated, each a short lower-case word.
    package static func encode(_ transports: [String]) -> String { transports.joined(separator: " ") }
    package static func decode(_ stored: String) -> [String] { stored.split(separator: " ").map(String.init) }
}

/// The outcome of recording a sign-in with a passkey.
package enum PasskeyUse: Sendable, Equatable {
    case recorded
    /// No such passkey (removed meanwhile).
    case unknown
    /// Another sign-in with this passkey stored a counter at least as high first (a replay, or a clone racing
    /// the original on another broker): refused.
    case counterNotIncreased
}

/// Passkeys and their users' handles, on both stores (schema v15).
package protocol PasskeyStore: Sendable {
    /// The user's WebAuthn user handle: the stored one, or `candidate` stored now (random bytes, never the
    /// email: an authenticator shows and syncs it).
    func passkeyHandle(user: UserID, orInsert candidate: String) async throws -> String

    /// The user a handle belongs to.
    func passkeyUser(handle: String) async throws -> UserID?

    /// Stores a new passkey; ``StoreError/conflict(_:)`` when its id is already registered (to anyone).
    func addPasskey(_ passkey: PasskeyRecord) async throws

    func passkey(id: String) async throws -> PasskeyRecord?

    /// The user's passkeys, oldest first.
    func passkeys(user: UserID) async throws -> [PasskeyRecord]

    /// Records a sign-in: the new counter and backup state, only if the counter still rises (or both are 0),
    /// as one conditional write — two brokers checking the same assertion cannot both record it.
    func recordPasskeyUse(id: String, signCount: Int64, backedUp: Bool, now: Int64) async throws -> PasskeyUse

    /// Removes the user's passkey `id`, unless it is the account's last way in (no password account, no
    /// linked identity, no other passkey) — decided in the same transaction as the removal.
    func removePasskey(id: String, user: UserID, now: Int64) async throws -> PasskeyRemoval

    // MARK: Recovery of an account whose only ways in are passkeys (schema v16)

    /// The address `user` proved with a mailed link and kept when the password account went (unlinking
    /// `custom` records it), or `nil`.
    func recoveryAddress(user: UserID) async throws -> RecoveryAddress?

    /// The account that may recover by mail at `email`: its recovery address is `email` and its only ways in
    /// are passkeys (no password account, no linked identity, at least one passkey). The most recently
    /// verified one when several kept the address.
    func passkeyRecoveryUser(email: String) async throws -> UserRecord?

    /// Recovery, in one transaction: spends `user`'s ``EmailLinkPurpose/passkeyRecovery`` link `linkHash` and
    /// ends every session of the user (API and browser; logouts queued), as a password reset does. `false`
    /// when the link is unknown, spent, expired or another user's.
    func recoverWithPasskey(linkHash: [UInt8], user: UserID, now: Int64) async throws -> Bool
}

/// What removing a passkey came to.
package enum PasskeyRemoval: Sendable, Equatable {
    case removed
    case notFound
    /// The account has no other way in: it would be locked out.
    case lastWayIn
}

/// A verified address kept for recovery by an account that signs in with passkeys only.
package struct RecoveryAddress: Sendable, Hashable {
    package var email: String
    package var verifiedAt: Int64

    package init(email: String, verifiedAt: Int64) {
        self.email = email
        self.verifiedAt = verifiedAt
    }
}
