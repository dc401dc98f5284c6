import BrokerCore

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

    /// Read on every CI mint. `nonisolated(nonsending)` (as the rest of the mint's and `/auth/me`'s chain of calls):
    /// it runs on the caller's executor, so the request's task does not go back through its event loop's queue to
    /// enter it (SQLite answers on the caller's thread; BENCHMARKS.md, eleventh session).
    nonisolated(nonsending) func client(name: String) async throws -> ClientRecord?

    /// Every client, by name.
    func clients() async throws -> [ClientRecord]

    /// Deletes a client; returns whether it existed.
    @discardableResult
    func deleteClient(name: String) async throws -> Bool

    /// Records that the token `jti` from `issuer` has been exchanged, until `expiresAt`.
    /// - Returns: `false` when it had been recorded before (a replay), `true` for the first use.
    func recordExchange(issuer: String, jti: String, expiresAt: Int64) async throws -> Bool
}
