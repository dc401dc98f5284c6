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

    package init(url: String, scopes: [String] = [], createdAt: Int64) {
        self.url = url
        self.scopes = scopes
        self.createdAt = createdAt
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
}
