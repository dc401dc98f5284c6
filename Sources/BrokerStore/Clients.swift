package import BrokerCore

/// The claim rules under which a CI client may exchange an OIDC token from its CI platform (RFC 8693).
package struct TrustPolicy: Sendable, Hashable {
    /// The issuer the subject token must come from (`iss`, exactly), and where its discovery lives.
    package var issuer: String
    /// A glob the whole `sub` must match: `*` any run of characters, `?` one character, `\` escapes.
    package var subjectPattern: String
    /// An audience the subject token's `aud` must contain.
    package var audience: String
    /// The oldest subject token accepted, in seconds since its `iat`.
    package var maxAge: Int64

    package init(issuer: String, subjectPattern: String, audience: String, maxAge: Int64) {
        self.issuer = issuer
        self.subjectPattern = subjectPattern
        self.audience = audience
        self.maxAge = maxAge
    }
}

/// A CI client: mints tokens with `client_credentials`, or by exchanging a trusted issuer's token.
///
/// The secret is kept only as a keyed hash (``secretHash``); it is shown once, when the client is added. A
/// client that only exchanges its CI platform's tokens has no secret at all (`nil`).
package struct ClientRecord: Sendable, Hashable {
    /// The client id; tokens minted for it have `sub: client:<name>`.
    package var name: String
    package var secretHash: String?
    /// The scopes the client may request; a request gets the intersection.
    package var scopes: [String]
    package var trust: TrustPolicy?
    package var createdAt: Int64

    package init(name: String, secretHash: String?, scopes: [String], trust: TrustPolicy?, createdAt: Int64) {
        self.name = name
        self.secretHash = secretHash
        self.scopes = scopes
        self.trust = trust
        self.createdAt = createdAt
    }
}

/// The CI-client half of the store: clients, and the `jti`s of subject tokens already exchanged.
package protocol ClientStore: Sendable {
    /// - Throws: ``StoreError/conflict(_:)`` when a client with that name exists.
    func createClient(_ client: ClientRecord) async throws

    func client(name: String) async throws -> ClientRecord?

    /// Every client, by name.
    func clients() async throws -> [ClientRecord]

    /// Deletes a client; returns whether it existed.
    @discardableResult
    func deleteClient(name: String) async throws -> Bool

    /// Records that the token `jti` from `issuer` has been exchanged, until `expiresAt`.
    /// - Returns: `false` when it had been recorded before (a replay), `true` for the first use.
    func recordExchange(issuer: String, jti: String, expiresAt: Int64) async throws -> Bool
}

/// A one-time code of the browser flow, as stored: its SHA-256, never the code. Bound to the CLI's PKCE
/// challenge and loopback redirect URI; single use; short-lived.
package struct AuthorizationCodeRecord: Sendable, Hashable {
    package var hash: [UInt8]
    package var userID: UserID
    package var codeChallenge: String
    package var redirectURI: String
    package var expiresAt: Int64
    /// For a link (`broker link`): the identity to attach to ``userID`` when the code is redeemed with its
    /// verifier; `nil` for a sign-in.
    package var link: IdentityRecord?
    /// The way in the sign-in went through; the session the code starts records it.
    package var signedInWith: ProviderID?
    /// For a link: the session that asked for it (schema v12); the code is refused once that session has ended.
    package var linkSession: String?

    package init(
        hash: [UInt8], userID: UserID, codeChallenge: String, redirectURI: String, expiresAt: Int64,
        link: IdentityRecord? = nil, signedInWith: ProviderID? = nil, linkSession: String? = nil
    ) {
        self.linkSession = linkSession
        self.hash = hash
        self.userID = userID
        self.codeChallenge = codeChallenge
        self.redirectURI = redirectURI
        self.expiresAt = expiresAt
        self.link = link
        self.signedInWith = signedInWith
    }
}

/// What presenting a one-time code came to.
package enum CodeRedemption: Sendable, Hashable {
    /// First use: the code is now spent.
    case redeemed(AuthorizationCodeRecord)
    case unknown
    /// Spent before; `sessionID` is the session its first use started (to be revoked, RFC 6749 §4.1.2).
    case reused(sessionID: String?)
}

/// The browser flow's state in the store: one-time codes and the single-use markers of sealed states.
package protocol BrowserFlowStore: Sendable {
    func createAuthorizationCode(_ code: AuthorizationCodeRecord) async throws
    func redeemAuthorizationCode(hash: [UInt8], now: Int64) async throws -> CodeRedemption
    /// Records the session a redeemed code started.
    func attachSession(toCode hash: [UInt8], sessionID: String) async throws
    /// Spends the single-use marker of a sealed sign-in state; `false` when it was spent before.
    func spendStateMarker(_ marker: String, expiresAt: Int64) async throws -> Bool

    /// Whether a sign-in state's marker has been spent (a completed sign-in), without writing anything.
    func isStateMarkerSpent(_ marker: String) async throws -> Bool
}

/// A device authorization (RFC 8628) as stored: the device code only as its SHA-256; the user code normalised
/// (eight letters, no hyphen).
package struct DeviceAuthorization: Sendable, Hashable {
    package var deviceCodeHash: [UInt8]
    package var userCode: String
    package var clientID: String
    /// The provider the CLI suggested (`--provider`), if any.
    package var provider: ProviderID?
    /// Where the request came from, shown to the person approving it (RFC 8628 §5.4).
    package var clientAddress: String?
    package var createdAt: Int64
    package var expiresAt: Int64
    /// Seconds the device must wait between polls (grows by 5 with each `slow_down`).
    package var interval: Int64
    /// `broker link --device`: the signed-in user the provider account is to be attached to; `nil` for a
    /// sign-in.
    package var linkUser: UserID?
    /// For a link: the session that asked for it (schema v12); the approval is refused once it has ended.
    package var linkSession: String?

    package init(
        deviceCodeHash: [UInt8], userCode: String, clientID: String, provider: ProviderID?, clientAddress: String?,
        createdAt: Int64, expiresAt: Int64, interval: Int64, linkUser: UserID? = nil, linkSession: String? = nil
    ) {
        self.linkSession = linkSession
        self.linkUser = linkUser
        self.deviceCodeHash = deviceCodeHash
        self.userCode = userCode
        self.clientID = clientID
        self.provider = provider
        self.clientAddress = clientAddress
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.interval = interval
    }
}

/// What one poll of a device code came to.
package enum DevicePoll: Sendable, Hashable {
    case unknown
    case expired
    /// Polled sooner than the interval allows; the interval is now `interval`.
    case slowDown(interval: Int64)
    case pending
    case denied
    /// Approved by `user`; the code is spent by this poll (a second one is ``spent``).
    case approved(UserID, signedInWith: ProviderID?)
    case spent
}

/// The device flow's state in the store, so that any broker can answer any poll or page.
package protocol DeviceStore: Sendable {
    /// Records a new authorization unless `maxPending` unexpired pending ones exist; `false` then. A user code
    /// already in use is a ``StoreError/conflict(_:)`` (the caller draws another).
    func createDeviceAuthorization(_ record: DeviceAuthorization, maxPending: Int, now: Int64) async throws -> Bool

    /// The pending, unexpired authorization with `userCode`.
    func pendingDeviceAuthorization(userCode: String, now: Int64) async throws -> DeviceAuthorization?

    /// Approves (`user` given) or denies (`nil`) a pending, unexpired authorization, once; `false` otherwise.
    /// `signedInWith` is the way in the approving person used; the session the approval starts records it.
    func decideDeviceAuthorization(userCode: String, user: UserID?, signedInWith: ProviderID?, now: Int64)
        async throws -> Bool

    /// One poll with the device code: pacing (`slow_down` adds 5 s; a poll up to one second early is
    /// tolerated), then the state; an approval is handed out once.
    func pollDeviceAuthorization(hash: [UInt8], now: Int64) async throws -> DevicePoll
}

/// The status column's values.
package enum DeviceStatus {
    package static let pending = "pending"
    package static let approved = "approved"
    package static let denied = "denied"
    package static let spent = "spent"
}
