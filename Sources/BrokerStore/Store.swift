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

    package init(
        id: String, userID: UserID, clientID: String, scope: String?, createdAt: Int64, revokedAt: Int64?,
        signedInWith: ProviderID? = nil, dpopJKT: String? = nil
    ) {
        self.dpopJKT = dpopJKT
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

    package static func conflict(_ reason: String) -> StoreError { StoreError(code: .conflict, reason: reason) }
    package static func unavailable(_ reason: String) -> StoreError { StoreError(code: .unavailable, reason: reason) }

    package var description: String { reason }
}

/// A user as `broker users` shows them.
package struct UserStatus: Sendable, Hashable {
    package var user: UserRecord
    /// When the user was disabled; `nil` while they may sign in.
    package var disabledAt: Int64?

    package init(user: UserRecord, disabledAt: Int64?) {
        self.user = user
        self.disabledAt = disabledAt
    }
}

/// The broker's persistent state, behind one protocol so that SQLite and PostgreSQL are interchangeable.
///
/// Every method is one transaction. Times are seconds since the epoch, passed in so that callers own the clock.
/// What `broker users` and `broker sessions` need: what an operator lists and removes while brokers run.
package protocol AdminStore: Sendable {
    /// Every user (of one provider, when given), oldest first, with when each was disabled.
    func users(provider: ProviderID?) async throws -> [UserStatus]

    /// One user and when they were disabled.
    func userStatus(id: UserID) async throws -> UserStatus?

    /// Disables a user — in the same transaction revoking every live session of theirs, so that their tokens
    /// stop at once and no session can start for them (``Store/createSession(_:firstToken:)`` refuses) — or
    /// enables them again. Returns whether the user exists.
    func setUserDisabled(id: UserID, disabled: Bool, now: Int64) async throws -> Bool

    /// Deletes a user and everything of theirs (password account, sessions, refresh tokens, codes); returns
    /// whether the user existed. Their access tokens are refused at once: their session is gone.
    func deleteUser(id: UserID, now: Int64) async throws -> Bool

    /// Every session (of one user, when given), newest first, revoked ones included.
    func sessions(user: UserID?) async throws -> [SessionRecord]

    /// Revokes every live session of `user`; returns how many were live.
    func revokeSessions(user: UserID, now: Int64) async throws -> Int
}

/// One audit event as stored (`server.audit_store`): its time, name and user for the queries, and the whole
/// JSON line as written to the audit log.
package struct AuditEventRecord: Sendable, Hashable {
    package var time: Int64
    package var event: String
    package var userID: String?
    package var document: String

    package init(time: Int64, event: String, userID: String?, document: String) {
        self.time = time
        self.event = event
        self.userID = userID
        self.document = document
    }
}

/// The audit trail in the database (`server.audit_store`), for `broker audit list`. Not copied by
/// `broker db copy`: it is history, not state.
package protocol AuditStore: Sendable {
    func appendAuditEvent(_ event: AuditEventRecord) async throws

    /// Events in the order they were stored (of one user, and from `since` on, when given), the newest `limit`.
    func auditEvents(user: UserID?, since: Int64?, limit: Int) async throws -> [AuditEventRecord]

    /// Deletes the events stored before `before` (`server.audit_retention`); how many went.
    @discardableResult func purgeAuditEvents(before: Int64) async throws -> Int
}

package protocol Store:
    ClientStore, BrowserFlowStore, SharedStateStore, CopyableStore, AdminStore, AuditStore, IdentityStore,
    DeviceStore, RateLimitStore, AppStore, PasskeyStore
{
    /// Answers when the store is reachable (`/healthz`).
    func ping() async throws

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

    /// The session, revoked or not; `nil` when unknown.
    func session(id: String) async throws -> SessionRecord?

    /// The session and its user in one read (what `/auth/me` needs); `nil` when either is unknown.
    func sessionWithUser(id: String) async throws -> SessionView?

    /// Deletes refresh tokens that expired before `before`, sessions left with none, exchanged-token records
    /// past their token's expiry, and rate-limit buckets full again by then (they hold no information).
    func purge(expiredBefore before: Int64) async throws

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

/// A provider account as the provider described it: who it is (`provider`, `subject`) and what it said.
package struct IdentityRecord: Sendable, Hashable {
    package var provider: ProviderID
    package var subject: String
    /// Only an address the provider verified.
    package var email: String?
    package var name: String?

    package init(provider: ProviderID, subject: String, email: String?, name: String?) {
        self.provider = provider
        self.subject = subject
        self.email = email
        self.name = name
    }

    /// The id of a user first made from this identity.
    package var derivedUserID: UserID { UserID(provider: provider, subject: subject) }

    /// The identity as one JSON text (a link's code keeps it in one column).
    package var serialized: String {
        var fields: [String: JSONValue] = ["provider": .string(provider.rawValue), "subject": .string(subject)]
        if let email { fields["email"] = .string(email) }
        if let name { fields["name"] = .string(name) }
        return String(decoding: JSONValue.object(fields).serializedBytes, as: UTF8.self)
    }

    /// Reads ``serialized``; `nil` for anything else.
    package init?(serialized: String) {
        guard let fields = JSONValue.parse(Array(serialized.utf8))?.objectValue,
            let provider = fields["provider"]?.stringValue.flatMap(ProviderID.init(rawValue:)),
            let subject = fields["subject"]?.stringValue, !subject.isEmpty
        else { return nil }
        self.init(
            provider: provider, subject: subject, email: fields["email"]?.stringValue,
            name: fields["name"]?.stringValue)
    }
}

/// An identity attached to a user: the way that provider account signs in as that user.
package struct LinkedIdentity: Sendable, Hashable {
    package var identity: IdentityRecord
    package var userID: UserID
    package var linkedAt: Int64

    package init(identity: IdentityRecord, userID: UserID, linkedAt: Int64) {
        self.identity = identity
        self.userID = userID
        self.linkedAt = linkedAt
    }
}

/// What signing in with a provider account came to.
package enum IdentitySignIn: Sendable, Hashable {
    case user(UserRecord)
    /// The identity was unlinked from the user that bears its derived id; it signs in as nobody until linked.
    case unlinked(from: UserID)
}

/// What attaching an identity to a user came to.
package enum LinkOutcome: Sendable, Hashable {
    case linked
    /// It was attached to this user already (nothing changed).
    case alreadyLinked
    /// Another user signs in with it.
    case ownedByAnotherUser
    /// The user has another account of this provider attached (one per provider).
    case providerTaken(subject: String)
    case userMissing
}

/// What adding an email + password way in to an existing user came to.
package enum PasswordLinkOutcome: Sendable, Hashable {
    case added
    /// Another account uses this email.
    case emailTaken
    /// The user has a password account already.
    case alreadyHasOne
    case userMissing
}

/// What detaching a way in came to.
package enum UnlinkOutcome: Sendable, Hashable {
    /// Detached; the live sessions that were started with it (their ids) are revoked in the same transaction.
    case unlinked(endedSessions: [String])
    case notLinked
    /// It is the user's only way to sign in.
    case lastWayIn
}

/// Linked identities (schema v8): which provider accounts sign in as which user. A user's ways in are their
/// identities plus their password account.
package protocol IdentityStore: Sendable {
    /// The identities attached to `user`, oldest first.
    func identities(user: UserID) async throws -> [LinkedIdentity]

    /// The user an identity signs in as, if it is attached to one.
    func identityOwner(provider: ProviderID, subject: String) async throws -> UserID?

    /// Attaches `identity` to `user` in one transaction: never one attached to another user, at most one per
    /// provider per user (a unique index decides, so two links at once cannot both win).
    func linkIdentity(_ identity: IdentityRecord, to user: UserID, now: Int64) async throws -> LinkOutcome

    /// Gives `user` an email + password way in (a password account), under the same unique email as
    /// registration.
    func addPasswordAccount(user: UserID, email: String, passwordHash: String, now: Int64) async throws
        -> PasswordLinkOutcome

    /// Frees an address nobody has confirmed (attack review RT2-5: an unverified address reserves nothing): in
    /// one transaction, the password account with `email` is deleted if its address is unconfirmed, with its
    /// user's unused mail links and the sessions started with it; a user left with no way in is deleted too.
    /// `nil` (nothing changed) when there is no such account or its address is confirmed.
    func releaseUnverifiedAddress(email: String, now: Int64) async throws -> ReleasedAddress?

    /// Detaches `user`'s identity of `provider` (for `.custom`: their password account, and their unused mail
    /// links), unless it is their last way in, and revokes their live sessions that were started with it. The
    /// user keeps their id.
    func unlinkIdentity(user: UserID, provider: ProviderID, now: Int64) async throws -> UnlinkOutcome
}

/// An unconfirmed address taken back from the user it was added to (``IdentityStore/releaseUnverifiedAddress``).
package struct ReleasedAddress: Sendable, Equatable {
    package var user: UserID
    /// The user had no other way in and is gone.
    package var userDeleted: Bool

    package init(user: UserID, userDeleted: Bool) {
        self.user = user
        self.userDeleted = userDeleted
    }
}

/// What a mail link is for (`email_links.purpose`).
package enum EmailLinkPurpose {
    package static let reset = "reset"
    package static let verify = "verify"
}

/// A signing key as stored: its private half sealed under the master key (``sealedKey``, base64url of an
/// AES-256-GCM box bound to the kid), never in the clear.
package struct StoredSigningKey: Sendable, Hashable {
    package var kid: String
    /// `ES256`, `RS256` or `EdDSA`.
    package var algorithm: String
    package var sealedKey: String
    package var createdAt: Int64
    /// When a newer key took over; `nil` for the current key.
    package var retiredAt: Int64?

    package init(kid: String, algorithm: String, sealedKey: String, createdAt: Int64, retiredAt: Int64?) {
        self.kid = kid
        self.algorithm = algorithm
        self.sealedKey = sealedKey
        self.createdAt = createdAt
        self.retiredAt = retiredAt
    }
}

/// One key of the login throttle (an account, an address, or both): failures in a row and the block they
/// started, and the attempts admitted but not yet settled.
package struct ThrottleEntry: Sendable, Hashable {
    package var failures = 0
    package var lastFailure = 0.0
    package var blockedUntil = 0.0
    package var inFlight = 0
    /// When ``inFlight`` last went up: reservations older than a minute are from a broker that died mid-attempt.
    package var inFlightSince = 0.0

    package init(
        failures: Int = 0, lastFailure: Double = 0, blockedUntil: Double = 0, inFlight: Int = 0,
        inFlightSince: Double = 0
    ) {
        self.failures = failures
        self.lastFailure = lastFailure
        self.blockedUntil = blockedUntil
        self.inFlight = inFlight
        self.inFlightSince = inFlightSince
    }
}

/// What every broker on one database must agree on: the signing keys, the secret keys (client-secret HMAC
/// key, sign-in sealing key), sealed under the master key, and the login throttle's counters.
package protocol SharedStateStore: Sendable {
    /// Every signing key, current and retired, newest first.
    func signingKeys() async throws -> [StoredSigningKey]

    /// Stores `key` as the first current key unless there is a current key already (ten brokers starting on
    /// an empty database agree on one key). Returns whether it was stored.
    func addFirstSigningKey(_ key: StoredSigningKey) async throws -> Bool

    /// In one transaction: retires the current key at `now`, deletes keys retired before `dropRetiredBefore`,
    /// and makes `key` current.
    func rotateSigningKey(to key: StoredSigningKey, now: Int64, dropRetiredBefore: Int64) async throws

    /// The sealed secret key called `name`, storing `sealed` first when there is none (the first writer wins,
    /// and every broker gets the same key).
    func secretKey(name: String, orInsert sealed: String, now: Int64) async throws -> String

    /// The sealed secret key called `name`, if any.
    func secretKey(name: String) async throws -> String?

    /// Replaces the sealed secret `name` if it is still `expected` (compare-and-set: of two rotations at once
    /// one wins); whether it was replaced.
    func replaceSecretKey(name: String, expected: String, with sealed: String) async throws -> Bool

    /// Reads the throttle entries of `keys`, lets `body` change them, and writes them back, in one
    /// transaction that holds the rows against other brokers (a missing entry is absent from the dictionary;
    /// one removed by `body` is deleted).
    func updateThrottle<T: Sendable>(
        keys: [String], _ body: @escaping @Sendable (inout [String: ThrottleEntry]) -> T
    ) async throws -> T
}

/// A token bucket: at most `capacity` tokens, refilled at `capacity / period` per second.
package struct TokenBucket: Sendable, Hashable {
    package var capacity: Double
    package var period: Double

    package init(capacity: Int, period: Double) {
        self.capacity = Double(capacity)
        self.period = period
    }

    var rate: Double { capacity / period }

    /// The bucket at `now` from what was stored (`nil`: a full bucket), with one token taken when `take` and
    /// one is there: its new level, when it will be full again, and `nil` or the seconds until a token is back.
    /// The stores and the server's in-memory limiter share this arithmetic.
    package func step(stored: (tokens: Double, updated: Double)?, now: Double, take: Bool)
        -> (tokens: Double, fullAt: Double, wait: Double?)
    {
        var tokens = capacity
        if let stored { tokens = min(capacity, stored.tokens + max(0, now - stored.updated) * rate) }
        guard tokens >= 1 else { return (tokens, now + (capacity - tokens) / rate, (1 - tokens) / rate) }
        if take { tokens -= 1 }
        return (tokens, now + (capacity - tokens) / rate, nil)
    }

    /// The bucket at `now` with one token given back (never above capacity): a reservation that turned out not
    /// to count. `nil` when nothing was stored (the bucket is full).
    package func refund(stored: (tokens: Double, updated: Double)?, now: Double) -> (tokens: Double, fullAt: Double)? {
        guard let stored else { return nil }
        let tokens = min(capacity, stored.tokens + max(0, now - stored.updated) * rate + 1)
        return (tokens, now + (capacity - tokens) / rate)
    }
}

/// Rate limits in the store (schema v11), so that every broker on one database counts against the same
/// buckets: a guesser or a mail bomber spread over brokers is slowed as if there were one.
package protocol RateLimitStore: Sendable {
    /// Takes one token from the bucket `key` of the limit `name` at `now` (seconds), in one transaction that
    /// holds the bucket against other brokers; with `take: false` only looks. `nil` when a token was there
    /// (and is now taken), else the seconds until one will be.
    func rateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double, take: Bool) async throws
        -> Double?

    /// Gives one token back to the bucket `key` of the limit `name` (a reservation taken first that turned out
    /// not to count), in one transaction.
    func refundRateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double) async throws
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
