package import BrokerCore

/// A broker user: one per provider account, keyed by ``UserID``.
package struct UserRecord: Sendable, Hashable {
    package var id: UserID
    package var email: String?
    package var name: String?
    /// Seconds since the epoch.
    package var createdAt: Int64

    package init(id: UserID, email: String?, name: String?, createdAt: Int64) {
        self.id = id
        self.email = email
        self.name = name
        self.createdAt = createdAt
    }
}

/// What ``Store/userProfile(id:)`` reads: the claims, and when they last changed (`nil`: never since the user was
/// made, whose ``UserRecord/createdAt`` it then is).
package struct UserProfile: Sendable, Hashable {
    package var claims: [String: String]
    package var updatedAt: Int64

    package init(claims: [String: String], updatedAt: Int64) {
        self.claims = claims
        self.updatedAt = updatedAt
    }

    /// Reads the stored column pair.
    package init(text: String?, updatedAt: Int64?, createdAt: Int64) {
        claims = text.flatMap { JSONValue.parse(Array($0.utf8))?.objectValue?.compactMapValues(\.stringValue) } ?? [:]
        self.updatedAt = updatedAt ?? createdAt
    }
}

/// A custom (email + password) account: the login name and the password's PHC hash string.
package struct PasswordAccount: Sendable, Hashable {
    package var user: UserRecord
    /// Trimmed, lowercased.
    package var email: String
    package var passwordHash: String
    /// When the address was confirmed through a mailed link; `nil`: not yet.
    package var emailVerifiedAt: Int64?

    package init(user: UserRecord, email: String, passwordHash: String, emailVerifiedAt: Int64? = nil) {
        self.user = user
        self.email = email
        self.passwordHash = passwordHash
        self.emailVerifiedAt = emailVerifiedAt
    }
}

/// A sign-in session: the family of refresh tokens one login starts (RFC 9700 §4.14.2).
///
/// Access tokens carry the session id (`sid`), so revoking the session also ends its access tokens.
package struct SessionRecord: Sendable, Hashable {
    package var id: String
    package var userID: UserID
    package var clientID: String
    package var scope: String?
    package var createdAt: Int64
    package var revokedAt: Int64?
    /// The way in the session was started with (schema v10): unlinking it ends the session. `nil` for sessions
    /// no sign-in started (token exchange) and for those started before v10.
    package var signedInWith: ProviderID?
    /// The RFC 7638 thumbprint of the DPoP key the session is bound to (schema v14): its refresh token is
    /// refused without a proof by that key. `nil`: not bound.
    package var dpopJKT: String?
    /// The claims its sign-in asked userinfo for (the `claims` parameter's `userinfo` member, OpenID Connect
    /// Core 5.5, as JSON; schema v20): written when the session starts, read by ``Store/session(id:)`` (the
    /// session reads of the token paths leave it out).
    package var claims: String?

    package init(
        id: String, userID: UserID, clientID: String, scope: String?, createdAt: Int64, revokedAt: Int64?,
        signedInWith: ProviderID? = nil, dpopJKT: String? = nil, claims: String? = nil
    ) {
        self.dpopJKT = dpopJKT
        self.claims = claims
        self.id = id
        self.userID = userID
        self.clientID = clientID
        self.scope = scope
        self.createdAt = createdAt
        self.revokedAt = revokedAt
        self.signedInWith = signedInWith
    }
}

/// A refresh token as stored: only its SHA-256 hash, never the token.
package struct RefreshTokenRecord: Sendable, Hashable {
    package var hash: [UInt8]
    package var sessionID: String
    package var createdAt: Int64
    package var expiresAt: Int64

    package init(hash: [UInt8], sessionID: String, createdAt: Int64, expiresAt: Int64) {
        self.hash = hash
        self.sessionID = sessionID
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }
}

/// A session with its user, read together: what a request bearing one of the session's tokens needs to answer.
package struct SessionView: Sendable, Hashable {
    package var session: SessionRecord
    package var user: UserRecord
    /// When the address of the user's password account was confirmed; `nil` without such an account or before
    /// its link was followed. It decides a custom account's `email_verified` claim, so that an access token
    /// and `/auth/me` need no second read for it.
    package var emailVerifiedAt: Int64?

    package init(session: SessionRecord, user: UserRecord, emailVerifiedAt: Int64?) {
        self.session = session
        self.user = user
        self.emailVerifiedAt = emailVerifiedAt
    }
}

/// What presenting a refresh token for rotation came to.
package enum RotationOutcome: Sendable, Hashable {
    /// The token was current: it is now used, `next` replaces it, and the session continues. The session's
    /// user is read in the same transaction: nothing the answer needs is read after the commit, so a store that
    /// fails afterwards cannot turn a committed rotation into an error answer (whose retry would look like reuse).
    case rotated(SessionView)
    /// No such token.
    case unknown
    /// The token has expired.
    case expired
    /// The session was revoked earlier (logout, revocation, or reuse).
    case revoked
    /// The session is bound to a DPoP key and the request did not prove possession of it: nothing was spent
    /// (a thief without the key cannot even burn the token).
    case boundToAnotherKey
    /// The token had already been used: its whole session is now revoked (RFC 9700 §4.14.2).
    case reused(sessionID: String)
}

/// Why a store operation failed.
package struct StoreError: Error, Sendable, CustomStringConvertible {
    package enum Code: Sendable, Hashable {
        /// A unique constraint refused the write (an account with that email exists).
        case conflict
        /// The store could not be opened or answered with an error.
        case unavailable
        /// The user is disabled: no session may start for them.
        case disabled
    }

    package let code: Code
    package let reason: String

    package init(code: Code, reason: String) {
        self.code = code
        self.reason = reason
    }

    package static func conflict(_ reason: String) -> StoreError { StoreError(code: .conflict, reason: reason) }
    package static func unavailable(_ reason: String) -> StoreError { StoreError(code: .unavailable, reason: reason) }

    package var description: String { reason }
}

package protocol Store:
    ClientStore, BrowserFlowStore, SharedStateStore, CopyableStore, AdminStore, AuditStore, IdentityStore,
    DeviceStore, RateLimitStore, AppStore, PasskeyStore, ResourceStore, SecondFactorStore
{
    /// Answers when the store is reachable (`/healthz`).
    func ping() async throws

    /// From now on, every store call's duration goes to `observer` (the server's metrics).
    func observe(_ observer: any StoreObserver)

    /// The schema version the database is at (``Schema/current`` once opened by this binary).
    func schemaVersion() async throws -> Int

    /// Whether several brokers may share this store (PostgreSQL): per-instance state such as the login
    /// throttle then lives in the store instead of in memory.
    var isShared: Bool { get }

    /// Releases connections (and background work); the store is unusable afterwards.
    func close() async

    /// Creates a user and its password account in one transaction.
    /// - Throws: ``StoreError/conflict(_:)`` when an account with `email` exists (a unique index decides,
    ///   so concurrent registrations of one email create exactly one account).
    /// `verifiedAt`: the address is confirmed already (a mailed link brought its owner here); `nil`: not yet.
    func createPasswordAccount(user: UserRecord, email: String, passwordHash: String, verifiedAt: Int64?) async throws

    /// The password account for a normalised email, if any.
    func passwordAccount(email: String) async throws -> PasswordAccount?

    /// Replaces a password hash (rehash on login after the cost went up).
    func updatePasswordHash(email: String, from old: String, to new: String) async throws

    /// The user a provider account signs in as, in one transaction: the user the identity is linked to (its
    /// email and name follow the provider), else a new user whose id is made from the identity
    /// (`provider:subject`) with the identity linked to it. ``IdentitySignIn/unlinked(from:)`` when that id
    /// belongs to a user the identity was unlinked from (a new user cannot take their id).
    func signIn(_ identity: IdentityRecord, now: Int64) async throws -> IdentitySignIn

    func user(id: UserID) async throws -> UserRecord?

    /// The user's profile (schema v22): the standard claims its provider gave (``Identity/profileClaims``) and
    /// when they last changed; `nil` for an unknown user. Read only where those claims are released.
    func userProfile(id: UserID) async throws -> UserProfile?

    /// Starts a session with its first refresh token; a disabled user gets ``StoreError/Code/disabled`` and no
    /// session (checked under the user's row lock, so a concurrent disable cannot miss the new session).
    func createSession(_ session: SessionRecord, firstToken: RefreshTokenRecord) async throws

    /// Spends a refresh token and stores its successor in the same session, atomically; detects reuse.
    func rotateRefreshToken(
        hash: [UInt8], nextHash: [UInt8], nextExpiresAt: Int64, now: Int64, proofKey: String?
    ) async throws -> RotationOutcome

    /// Revokes the session a refresh token belongs to; returns whether the token was known.
    @discardableResult
    func revokeSession(byRefreshTokenHash hash: [UInt8], now: Int64) async throws -> Bool

    /// Revokes a session by id; returns whether it existed and was active.
    @discardableResult
    func revokeSession(id: String, now: Int64) async throws -> Bool

    /// The session, revoked or not, with its ``SessionRecord/claims``; `nil` when unknown.
    func session(id: String) async throws -> SessionRecord?

    /// The session and its user in one read (what `/auth/me` needs); `nil` when either is unknown. Runs on the
    /// caller's executor, as ``ClientStore/client(name:)`` does.
    nonisolated(nonsending) func sessionWithUser(id: String) async throws -> SessionView?

    /// Deletes refresh tokens that expired before `before`, sessions left with none, exchanged-token records
    /// past their token's expiry, and rate-limit buckets full again by then (they hold no information); and
    /// the short-lived rows anyone can cause to be written — spent state markers (DPoP proofs' `jti`s, sign-in
    /// markers) and pushed authorization requests — that expired before `shortLivedBefore` (RT3-8: at their own
    /// expiry, not a day later).
    func purge(expiredBefore before: Int64, shortLivedBefore: Int64) async throws

    // MARK: Account recovery

    /// The password account of a user, if the user has one.
    func passwordAccount(user: UserID) async throws -> PasswordAccount?

    /// Records a single-use mail link (the SHA-256 of its secret) for `user`; the user's earlier unused links
    /// of the same `purpose` stop working in the same transaction (only the newest link works).
    func createEmailLink(hash: [UInt8], user: UserID, purpose: String, expiresAt: Int64, now: Int64) async throws

    /// The user of a link that exists, has `purpose`, is unused and has not expired at `now`; the link is not
    /// spent (a page shows the form first).
    func emailLinkUser(hash: [UInt8], purpose: String, now: Int64) async throws -> UserRecord?

    /// A password reset, in one transaction: spends the `reset` link, replaces the password hash of its user's
    /// account, and revokes every session of that user. `nil` (and nothing changed) when the link is unknown,
    /// spent or expired.
    func resetPassword(linkHash: [UInt8], passwordHash: String, now: Int64) async throws -> UserID?

    /// Address verification, in one transaction: spends the `verify` link and marks its user's address as
    /// verified (the first time; a later link keeps the first date). `nil` when the link is unknown, spent or
    /// expired.
    func verifyEmail(linkHash: [UInt8], now: Int64) async throws -> UserID?

    /// A password change, in one transaction: replaces the hash if it is still `old` (compare-and-set: two
    /// changes at once cannot both win) and revokes every session of the user but `keepingSession`. Returns
    /// whether the hash was replaced.
    func changePassword(user: UserID, from old: String, to new: String, keepingSession: String?, now: Int64)
        async throws -> Bool
}

/// What a mail link is for (`email_links.purpose`).
package enum EmailLinkPurpose {
    package static let reset = "reset"
    package static let verify = "verify"
    /// A new passkey for an account whose only ways in are passkeys (schema v16).
    package static let passkeyRecovery = "passkey_recovery"
    /// Removing a second factor whose authenticator and recovery codes are lost (after the password).
    package static let secondFactorRecovery = "second_factor_recovery"
}

extension Store {
    /// A new account whose address is not confirmed yet.
    package func createPasswordAccount(user: UserRecord, email: String, passwordHash: String) async throws {
        try await createPasswordAccount(user: user, email: email, passwordHash: passwordHash, verifiedAt: nil)
    }

    package var isShared: Bool { false }
    package func close() async {}
}

extension Store {
    /// A rotation for a request that proved no DPoP key: a bound session's token is refused, unspent.
    package func rotateRefreshToken(hash: [UInt8], nextHash: [UInt8], nextExpiresAt: Int64, now: Int64)
        async throws -> RotationOutcome
    {
        try await rotateRefreshToken(
            hash: hash, nextHash: nextHash, nextExpiresAt: nextExpiresAt, now: now, proofKey: nil)
    }
}

extension Store {
    /// ``purge(expiredBefore:shortLivedBefore:)`` with one cut-off for everything.
    package func purge(expiredBefore before: Int64) async throws {
        try await purge(expiredBefore: before, shortLivedBefore: before)
    }
}
