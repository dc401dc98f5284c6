package import BrokerCore

/// A one-time authorization code, as stored: its SHA-256, never the code. The one authorization endpoint issues
/// it to an app or to the broker CLI (client id `broker-cli`); single use; short-lived (schema v17: one record
/// for both, where there were two).
package struct AuthorizationCodeRecord: Sendable, Hashable {
    package var hash: [UInt8]
    package var clientID: String
    package var userID: UserID
    package var redirectURI: String
    /// The PKCE S256 challenge, when the client sent one (public clients, the CLI among them, must).
    package var codeChallenge: String?
    /// Space-separated, as granted (empty for the CLI, whose sessions carry no scope).
    package var scope: String
    package var nonce: String?
    package var authTime: Int64
    /// The way in the sign-in went through; the session the code starts records it.
    package var signedInWith: ProviderID
    /// The broker's browser session the code was issued in; `nil` for a CLI sign-in that started none (the
    /// `/auth/{provider}/start` shortcut, `broker link`, a passkey at the CLI's page).
    package var browserSession: String?
    /// For a link (`broker link`): the identity to attach to ``userID`` when the code is redeemed with its
    /// verifier, while ``linkSession`` (the session that asked) is live.
    package var link: IdentityRecord?
    package var linkSession: String?
    /// The resource (RFC 8707) the request named: the `aud` of the access token the code is redeemed for
    /// (schema v18); `nil`: the client's own audience.
    package var resource: String?
    /// The request's `claims` parameter (OpenID Connect Core 5.5) as JSON (schema v20); `nil`: none.
    package var claims: String?
    package var expiresAt: Int64

    package init(
        hash: [UInt8], clientID: String, userID: UserID, redirectURI: String, codeChallenge: String?,
        scope: String = "", nonce: String? = nil, authTime: Int64, signedInWith: ProviderID,
        browserSession: String? = nil, link: IdentityRecord? = nil, linkSession: String? = nil,
        resource: String? = nil, claims: String? = nil, expiresAt: Int64
    ) {
        self.resource = resource
        self.claims = claims
        self.hash = hash
        self.clientID = clientID
        self.userID = userID
        self.redirectURI = redirectURI
        self.codeChallenge = codeChallenge
        self.scope = scope
        self.nonce = nonce
        self.authTime = authTime
        self.signedInWith = signedInWith
        self.browserSession = browserSession
        self.link = link
        self.linkSession = linkSession
        self.expiresAt = expiresAt
    }
}

/// What spending a one-time code found.
package enum CodeRedemption: Sendable, Hashable {
    /// First use: the code, now spent.
    case redeemed(AuthorizationCodeRecord)
    /// Spent before: the session it started (if any), which the caller revokes (RFC 6749 §4.1.2).
    case reused(session: String?)
    /// Not a code of this store.
    case unknown
    /// Never used, but past its expiry: it starts nothing (and stays unspent until purged).
    case expired
    /// The browser session the code was issued in has ended since (signed out, revoked, reset, expired): the
    /// code is spent and starts nothing (RT3-5).
    case browserSessionEnded
}

/// The browser flow's state in the store: one-time codes and the single-use markers of sealed states.
package protocol BrowserFlowStore: Sendable {
    func createAuthorizationCode(_ code: AuthorizationCodeRecord) async throws
    /// Spends a code once, in one transaction.
    func redeemAuthorizationCode(hash: [UInt8], now: Int64) async throws -> CodeRedemption
    /// Records the session a redeemed code started (so that a replay can end it), and, for a code issued in a
    /// browser session, that the client signed in through it (so that its end reaches the app: back-channel
    /// logout). If that browser session ended between the redemption and now, the new session is revoked with
    /// it (RT3-5).
    func attachSession(_ session: String, toCode hash: [UInt8], now: Int64) async throws
    /// Spends the single-use marker of a sealed sign-in state; `false` when it was spent before.
    func spendStateMarker(_ marker: String, expiresAt: Int64) async throws -> Bool

    /// Whether a sign-in state's marker has been spent (a completed sign-in), without writing anything.
    func isStateMarkerSpent(_ marker: String) async throws -> Bool
}
