import BrokerCore

/// An API broker issues tokens for (RFC 8707, issue "Tokens for every door"): named by the operator with
/// `broker resource add URL`. A token asked for with `resource=URL` carries that URL as its `aud`, so the API
/// checks one value and no other API takes the token.
package struct ResourceRecord: Sendable, Hashable {
    /// The resource indicator: an absolute `https` URI (or `http` on a loopback host), no fragment.
    package var url: String
    /// Scopes a client may ask for together with this resource, beyond what its own registration allows.
    package var scopes: [String]
    package var createdAt: Int64
    /// The API takes plain bearer tokens only (a git server, a container registry: the protocol carries a
    /// password, never a proof; `--bearer`, schema v19): its tokens are never DPoP-bound and live at most
    /// ``bearerLifetime`` seconds, so one left in a tool's memory or a log is soon worth nothing.
    package var bearer: Bool

    package init(url: String, scopes: [String] = [], createdAt: Int64, bearer: Bool = false) {
        self.url = url
        self.scopes = scopes
        self.createdAt = createdAt
        self.bearer = bearer
    }

    /// The longest a bearer-only resource's token lives (shorter when `server.access_token_ttl` is).
    package static let bearerLifetime: Int64 = 300
}

/// An initial access token (RFC 7591 §3, `broker client registration-token`): what a client presents at
/// `POST /auth/clients` when `server.client_registration` is `token`. The store keeps its SHA-256 only; each is
/// good for one registration before it expires.
package struct RegistrationTokenRecord: Sendable, Hashable {
    package var createdAt: Int64
    package var expiresAt: Int64
    package var usedAt: Int64?

    package init(createdAt: Int64, expiresAt: Int64, usedAt: Int64? = nil) {
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.usedAt = usedAt
    }
}

/// The registered resources in the store (schema v18): read on each request that names one, so `broker resource
/// add|remove` takes effect at once on every broker of a shared database.
package protocol ResourceStore: Sendable {
    /// Throws ``StoreError/conflict(_:)`` when the URL is registered already.
    func createResource(_ resource: ResourceRecord) async throws
    func resource(url: String) async throws -> ResourceRecord?
    /// Every resource, by URL.
    func resources() async throws -> [ResourceRecord]
    /// `false` when no resource has this URL.
    func deleteResource(url: String) async throws -> Bool

    /// Stores an initial access token under its SHA-256 (schema v19).
    func createRegistrationToken(hash: [UInt8], _ token: RegistrationTokenRecord) async throws
    /// Spends an initial access token: `true` once, for a token that exists, is unused and has not expired at
    /// `now`; every later call (any broker) is `false`.
    func spendRegistrationToken(hash: [UInt8], now: Int64) async throws -> Bool
}
