package import BrokerCore

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
