import BrokerConfiguration
import BrokerCore
import BrokerCredentials
import BrokerHTTP
import BrokerStore
import Synchronization

/// Client ID Metadata Documents (issue "Tokens for every door" item 4; the OAuth draft MCP clients use since
/// 2026): an app whose `client_id` is an https URL describes itself in a JSON document at that URL, so it needs no
/// registration. broker fetches the document when the app first appears and whenever its copy is stale, under
/// the rules an outbound call to a URL someone else chose needs:
///
/// - the URL: https, a path that is not `/`, no fragment, user, query or dot segments; its host on
///   `server.client_metadata_hosts` when that is set;
/// - the fetch: public addresses only (checked after resolution, at connect time, so no name can point it at
///   loopback, a private network or a cloud's metadata address) unless the host is listed, no redirects, no
///   proxy, at most ``maxDocumentBytes`` and ``fetchTimeout``, the operator's `server.ca_file` if set;
/// - the document: a JSON object whose `client_id` is the URL exactly, with the metadata an open registration
///   may have (public client, https or loopback redirect URIs), checked by ``RegistrationService/metadata(_:mode:)``.
///
/// A good document is kept for its `Cache-Control: max-age` (between ``minimumFreshness`` and
/// ``maximumFreshness``, ``defaultFreshness`` without one) and stored as an app (`registration.mode` =
/// `metadata_document`), so it is listed, removable and signed out like any other. A bad one is a clear
/// `invalid_client` and changes nothing that was stored.
package final class ClientMetadataDocuments: ContextualService, Sendable {
    package let context: ServiceContext
    let http: @Sendable () -> any HTTPTransport
    private let fresh = Mutex<[String: (app: AppRecord, until: Int64)]>([:])
    /// Fetches per host (``fetchesPerHostPerMinute``) and in all (``fetchesPerMinute``): an unknown client_id is
    /// a request anyone can make, and each would otherwise make the broker call out once more.
    let perHost: RateLimiter
    let overall: RateLimiter

    static let mode = "metadata_document"
    static let maxDocumentBytes = 16 * 1024
    static let fetchTimeout: Duration = .seconds(5)
    static let defaultFreshness: Int64 = 300
    static let minimumFreshness: Int64 = 60
    static let maximumFreshness: Int64 = 86_400
    /// Documents kept in memory at most; past it the cache starts over (the store keeps every app).
    static let maxCached = 1000
    static let fetchesPerHostPerMinute = 20
    static let fetchesPerMinute = 120

    init(context: ServiceContext, http: @escaping @Sendable () -> any HTTPTransport) {
        self.context = context
        self.http = http
        perHost = RateLimiter(capacity: Self.fetchesPerHostPerMinute, per: 60, clock: context.tokens.clock)
        overall = RateLimiter(capacity: Self.fetchesPerMinute, per: 60, clock: context.tokens.clock)
    }

    /// Whether `clientID` names a metadata document (an https URL) rather than a registered app.
    static func isDocumentURL(_ clientID: String) -> Bool { clientID.utf8.starts(with: "https://".utf8) }

    /// The app the document at `url` describes: from memory while fresh, else fetched and stored.
    /// - Throws: `invalid_client` (400) saying what is wrong with the URL or the document.
    func app(_ url: String) async throws -> AppRecord {
        let time = now
        if let kept = fresh.withLock({ $0[url] }), kept.until > time { return kept.app }
        let (listed, host) = try admissible(url)
        if perHost.take(host) != nil || overall.take("all") != nil {
            metrics.throttled("client_metadata_documents")
            throw Self.refusal(url, "too many metadata documents were fetched just now; try again in a minute")
        }
        let (app, freshFor) = try await fetch(url, listed: listed, at: time)
        if try await store.resource(url: url) != nil {
            throw Self.refusal(url, "it is a registered resource's URL, and an app's tokens carry its client_id as aud")
        }
        try await store.saveDocumentedApp(app)
        let stored = try await store.app(clientID: url)
        guard let stored, stored.registration?.mode == Self.mode else {
            throw Self.refusal(url, "an app registered another way has this client_id")
        }
        fresh.withLock { cache in
            if cache.count >= Self.maxCached { cache.removeAll() }
            cache[url] = (stored, time + freshFor)
        }
        metrics.clientRegistration(outcome: "metadata_document")
        audit.record(
            "client_registered",
            fields: [
                "client_id": url, "mode": Self.mode, "kind": "public_app",
                "redirect_host": RegistrationService.redirectHost(stored) ?? "-",
            ])
        return stored
    }

    static func refusal(_ url: String, _ reason: String) -> APIError {
        APIError(
            status: 400, code: .invalidClient,
            detail: "the client's metadata document \(url.prefix(300)) cannot be used: \(reason)")
    }

    /// Whether `url` may be fetched at all; returns whether its host is on the operator's list (then its address
    /// may be private), and the host.
    func admissible(_ url: String) throws -> (listed: Bool, host: String) {
        guard configuration.acceptsClientMetadataDocuments else {
            throw Self.refusal(url, "this broker takes no metadata documents (server.client_metadata_hosts)")
        }
        guard url.utf8.count <= 2048, let parsed = APIURL(url), parsed.scheme == "https",
            !url.contains("#"), !url.contains("?"), !url.contains("@"), parsed.path.count > 1
        else {
            throw Self.refusal(url, "a client_id URL is https with a path, and no fragment, query or user")
        }
        let hosts = configuration.clientMetadataHosts
        if !hosts.isEmpty && !hosts.contains(parsed.host) {
            throw Self.refusal(url, "its host is not one of server.client_metadata_hosts")
        }
        return (hosts.contains(parsed.host), parsed.host)
    }

    private func fetch(_ url: String, listed: Bool, at time: Int64) async throws -> (AppRecord, Int64) {
        var request = HTTPClientRequest(url: url, headers: [("Accept", "application/json")])
        request.timeout = Self.fetchTimeout
        request.connectTimeout = Self.fetchTimeout
        request.maxResponseBytes = Self.maxDocumentBytes
        request.publicAddressesOnly = !listed
        let response: HTTPClientResponse
        do {
            response = try await http().send(request)
        } catch let error as HTTPClientError {
            let reason =
                switch error.kind {
                case .responseTooLarge: "it is larger than \(Self.maxDocumentBytes) bytes"
                case .timeout: "it did not arrive within \(Self.fetchTimeout)"
                case .forbiddenAddress: error.message
                default: "it could not be fetched (\(error.message))"
                }
            audit.record("client_registered", outcome: "failure", fields: ["mode": Self.mode, "reason": "fetch"])
            throw Self.refusal(url, reason)
        }
        guard response.status == 200 else {
            throw Self.refusal(
                url,
                (300..<400).contains(response.status)
                    ? "it redirects (HTTP \(response.status)); a metadata document is served where its URL says"
                    : "HTTP \(response.status)")
        }
        guard case .object(let fields)? = JSONValue.parse(response.body) else {
            throw Self.refusal(url, "it is not a JSON object")
        }
        guard fields["client_id"]?.stringValue == url else {
            throw Self.refusal(url, "its client_id is not its own URL")
        }
        if let method = fields["token_endpoint_auth_method"]?.stringValue, method != "none" {
            throw Self.refusal(url, "token_endpoint_auth_method \"\(method.prefix(64))\": only public clients (none)")
        }
        let metadata: RegistrationService.Metadata
        do {
            metadata = try RegistrationService.metadata(fields, mode: .open)
        } catch {
            throw Self.refusal(url, error.detail)
        }
        let app = AppRecord(
            clientID: url, secretHash: nil, redirectURIs: metadata.redirectURIs,
            postLogoutRedirectURIs: metadata.postLogoutRedirectURIs, idTokenAlgorithm: metadata.idTokenAlgorithm,
            createdAt: time, registration: AppRecord.Registration(mode: Self.mode, clientName: metadata.clientName))
        return (app, Self.freshness(response.header("Cache-Control")))
    }

    /// How long a document stays fresh, from its `Cache-Control` (`max-age`; `no-store`/`no-cache`: the minimum).
    package static func freshness(_ cacheControl: String?) -> Int64 {
        guard let cacheControl else { return defaultFreshness }
        var seconds: Int64?
        for directive in cacheControl.lowercased().split(separator: ",") {
            let trimmed = directive.filter { $0 != " " && $0 != "\t" }
            if trimmed == "no-store" || trimmed == "no-cache" { return minimumFreshness }
            if trimmed.hasPrefix("max-age=") { seconds = Int64(trimmed.dropFirst(8)) }
        }
        return min(max(seconds ?? defaultFreshness, minimumFreshness), maximumFreshness)
    }
}
