package import BrokerCore

/// An app that signs its users in through broker (a relying party, issue "Sign in to any app"): registered by
/// `broker client add NAME --redirect-uri URI`. Confidential (a secret, kept as a keyed hash like CI
/// clients') or public (no secret; PKCE required).
package struct AppRecord: Sendable, Hashable {
    package var clientID: String
    /// The keyed hash of the secret; `nil` for a public client.
    package var secretHash: String?
    /// Matched exactly (RFC 8252 §7.3 loopback URIs of public clients: any port).
    package var redirectURIs: [String]
    package var postLogoutRedirectURIs: [String]
    package var backchannelLogoutURI: String?
    /// Skips consent.
    package var firstParty: Bool
    /// `RS256` (the default OpenID Connect requires), `ES256` or `EdDSA`.
    package var idTokenAlgorithm: String
    /// Scopes the app may ask for beyond `openid profile email offline_access`.
    package var scopes: [String]
    package var createdAt: Int64
    /// Every authorization request must come through `/auth/par` (RFC 9126 §6; `--require-par`).
    package var requirePAR: Bool
    /// How an app that registered itself did it (RFC 7591 at `POST /auth/clients`, schema v19): `nil` for an app
    /// the operator added (`broker client add`).
    package var registration: Registration?
    /// The public keys (a JWK Set, JSON) its `private_key_jwt` client assertions are signed with (RFC 7523,
    /// schema v21); or ``jwksURI``, where broker fetches them. Either makes the app confidential without a secret.
    package var jwks: String?
    package var jwksURI: String?
    /// The sector (a host) of an app given pairwise subjects (OpenID Connect Core 8.1, schema v23): its users'
    /// `sub` is made for that sector, so apps of different sectors cannot match their users up. `nil`: public
    /// subjects (the user id).
    package var pairwiseSector: String?
    /// The algorithm the app's userinfo answers are signed with (`userinfo_signed_response_alg`, schema v24);
    /// `nil`: plain JSON.
    package var userinfoAlgorithm: String?
    /// Whether its users must sign in with two factors (`broker client add --require-mfa`, schema v25): a
    /// sign-in at `acr` 1 does not reach it.
    package var requireMFA: Bool

    /// No way to authenticate: a native or browser app (PKCE required).
    package var isPublic: Bool { secretHash == nil && jwks == nil && jwksURI == nil }

    /// How it authenticates at the token endpoint: with its keys, with its secret (Basic or in the form), or not.
    package var authenticatesWithKeys: Bool { jwks != nil || jwksURI != nil }

    /// An app that registered itself: how, and the name it gave (shown, escaped and marked as its own claim, on
    /// the consent page — never taken as who it is).
    package struct Registration: Sendable, Hashable {
        /// `token` (an operator's initial access token was presented) or `open`.
        package var mode: String
        /// RFC 7591 `client_name`, if it gave one.
        package var clientName: String?

        package init(mode: String, clientName: String?) {
            self.mode = mode
            self.clientName = clientName
        }
    }

    package init(
        clientID: String, secretHash: String?, redirectURIs: [String], postLogoutRedirectURIs: [String] = [],
        backchannelLogoutURI: String? = nil, firstParty: Bool = false, idTokenAlgorithm: String = "RS256",
        scopes: [String] = [], createdAt: Int64, requirePAR: Bool = false, registration: Registration? = nil,
        jwks: String? = nil, jwksURI: String? = nil, pairwiseSector: String? = nil, userinfoAlgorithm: String? = nil,
        requireMFA: Bool = false
    ) {
        self.requireMFA = requireMFA
        self.pairwiseSector = pairwiseSector
        self.userinfoAlgorithm = userinfoAlgorithm
        self.jwks = jwks
        self.jwksURI = jwksURI
        self.clientID = clientID
        self.secretHash = secretHash
        self.redirectURIs = redirectURIs
        self.postLogoutRedirectURIs = postLogoutRedirectURIs
        self.backchannelLogoutURI = backchannelLogoutURI
        self.firstParty = firstParty
        self.idTokenAlgorithm = idTokenAlgorithm
        self.scopes = scopes
        self.createdAt = createdAt
        self.requirePAR = requirePAR
        self.registration = registration
    }
}

/// The broker's own sign-in in a browser: an opaque cookie names it (the store keeps its SHA-256 only), so any
/// broker behind a load balancer knows it, and a second app signs in without credentials.
package struct BrowserSessionRecord: Sendable, Hashable {
    /// Public id: the id token's `sid`.
    package var id: String
    package var userID: UserID
    package var signedInWith: ProviderID
    /// When the person last proved who they are (`auth_time`).
    package var authTime: Int64
    package var expiresAt: Int64
    package var revokedAt: Int64?

    package init(
        id: String, userID: UserID, signedInWith: ProviderID, authTime: Int64, expiresAt: Int64,
        revokedAt: Int64? = nil
    ) {
        self.id = id
        self.userID = userID
        self.signedInWith = signedInWith
        self.authTime = authTime
        self.expiresAt = expiresAt
        self.revokedAt = revokedAt
    }
}

/// What a user allowed an app (the consent page's Allow, remembered).
package struct ConsentRecord: Sendable, Hashable {
    package var clientID: String
    package var scopes: [String]
    package var grantedAt: Int64

    package init(clientID: String, scopes: [String], grantedAt: Int64) {
        self.clientID = clientID
        self.scopes = scopes
        self.grantedAt = grantedAt
    }
}

/// A back-channel logout owed to an app (Back-Channel Logout 1.0 §2.5), as the queue holds it: written in the
/// transaction that ends the browser session, so a broker that stops before sending loses none.
package struct LogoutDelivery: Sendable, Hashable {
    package var id: String
    package var clientID: String
    /// The app's `backchannel_logout_uri` when the delivery was claimed.
    package var uri: String
    /// The `sub` (the user may be gone by now: a deleted account is logged out too).
    package var subject: String
    /// The browser session that ended: the logout token's `sid`.
    package var sid: String
    /// Attempts before this one.
    package var attempts: Int
    package var createdAt: Int64
    /// After this, a failed delivery is dropped (and audited as such).
    package var giveUpAt: Int64

    package init(
        id: String, clientID: String, uri: String, subject: String, sid: String, attempts: Int, createdAt: Int64,
        giveUpAt: Int64
    ) {
        self.id = id
        self.clientID = clientID
        self.uri = uri
        self.subject = subject
        self.sid = sid
        self.attempts = attempts
        self.createdAt = createdAt
        self.giveUpAt = giveUpAt
    }

    /// How long a queued logout is retried.
    package static let retryFor: Int64 = 3600
    /// How long a claimed delivery is held by the broker that claimed it before another may take it.
    package static let lease: Int64 = 30
}

/// A pushed authorization request (RFC 9126), stored under the SHA-256 of its `request_uri`.
package struct PushedRequestRecord: Sendable, Hashable {
    package var clientID: String
    /// The request's parameters, form-encoded, as the app pushed them.
    package var parameters: String
    package var expiresAt: Int64

    package init(clientID: String, parameters: String, expiresAt: Int64) {
        self.clientID = clientID
        self.parameters = parameters
        self.expiresAt = expiresAt
    }
}

/// The OpenID Provider's facet of the store (schema v13): apps, browser sessions, consents and app codes.
package protocol AppStore: Sendable {
    /// - Throws: ``StoreError/conflict(_:)`` when an app with that client id exists.
    func createApp(_ app: AppRecord) async throws
    /// Stores an app described by its own metadata document (its `client_id` is the document's URL), or replaces
    /// what a previous fetch stored — never an app registered any other way.
    func saveDocumentedApp(_ app: AppRecord) async throws
    func app(clientID: String) async throws -> AppRecord?
    /// Every app, by client id.
    func apps() async throws -> [AppRecord]
    /// Deletes an app, its consents and codes, and ends the sessions it started; `nil` when there was no such
    /// app, else the ids of the sessions ended.
    func deleteApp(clientID: String, now: Int64) async throws -> [String]?

    /// Stores a browser session under the SHA-256 of its cookie.
    func createBrowserSession(_ session: BrowserSessionRecord, cookieHash: [UInt8]) async throws
    /// The live browser session (not revoked, not expired at `now`, its user not disabled) the cookie names.
    func browserSession(cookieHash: [UInt8], now: Int64) async throws -> BrowserSessionRecord?
    /// Browser sessions (of `user`, or everyone's), newest first, live or not until purged.
    func browserSessions(user: UserID?) async throws -> [BrowserSessionRecord]
    /// RP-initiated logout: ends the browser session and the sessions apps started through it (their refresh
    /// tokens stop), in one transaction; the ids of those sessions.
    func endBrowserSession(id: String, now: Int64) async throws -> [String]
    /// Ends a browser session; whether it was live.
    @discardableResult func revokeBrowserSession(id: String, now: Int64) async throws -> Bool

    /// The scopes `user` has allowed `clientID` (space-separated, sorted), if any.
    func consent(user: UserID, clientID: String) async throws -> [String]?
    /// Remembers that `user` allowed `clientID` these scopes (replacing what was remembered).
    func recordConsent(user: UserID, clientID: String, scopes: [String], now: Int64) async throws
    /// What `user` has allowed, one entry per app, by client id.
    func consents(user: UserID) async throws -> [ConsentRecord]
    /// Takes back what `user` allowed `clientID`, in one transaction: the consent is forgotten (the next sign-in
    /// asks again), the app's codes for the user are dropped and its sessions for the user end (their refresh
    /// tokens stop). The ids of the sessions ended.
    func revokeConsent(user: UserID, clientID: String, now: Int64) async throws -> [String]

    /// A refresh token as stored (introspection, RFC 7662), and whether it has been spent by a rotation.
    func refreshToken(hash: [UInt8]) async throws -> (token: RefreshTokenRecord, spent: Bool)?

    /// Back-channel logouts due at `now` (at most `limit`), each leased for ``LogoutDelivery/lease`` seconds
    /// to the caller so that no other broker sends it meanwhile. Deliveries for an app that no longer has a
    /// `backchannel_logout_uri` are dropped.
    func claimLogoutDeliveries(now: Int64, limit: Int) async throws -> [LogoutDelivery]
    /// A delivery that succeeded, or was given up: it leaves the queue.
    func finishLogoutDelivery(id: String) async throws
    /// A delivery that failed: tried again at `at`.
    func retryLogoutDelivery(id: String, at: Int64) async throws
    /// How many logouts wait in the queue.
    func pendingLogoutDeliveries() async throws -> Int

    /// Stores a pushed request under the SHA-256 of its `request_uri`.
    func createPushedRequest(_ request: PushedRequestRecord, hash: [UInt8]) async throws
    /// Takes a pushed request once (any broker; a second take finds nothing), if it has not expired at `now`.
    func takePushedRequest(hash: [UInt8], now: Int64) async throws -> PushedRequestRecord?
}

extension AppRecord {
    /// The scopes as stored (JSON text of the lists).
    package static func encode(_ list: [String]) -> String { JSONValue.array(list.map(JSONValue.string)).serialized() }

    package static func decode(_ text: String?) -> [String] {
        guard let text, let parsed = JSONValue.parse(Array(text.utf8))?.arrayValue else { return [] }
        return parsed.compactMap(\.stringValue)
    }
}
