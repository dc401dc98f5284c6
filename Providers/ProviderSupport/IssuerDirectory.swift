package import BrokerCore
package import BrokerCrypto
package import BrokerHTTPTypes
package import Logging
import Synchronization

/// OpenID issuers' discovery documents and signing keys, fetched with libcurl and cached: the CI platforms
/// that clients trust (GitHub Actions, GitLab, …) and the sign-in providers (Google, Microsoft).
///
/// - Discovery must name exactly the configured issuer (OpenID Connect Discovery §4.3), and its
///   `jwks_uri` must be https (http only on a loopback host).
/// - Keys are kept for ``freshFor`` seconds; a token whose `kid` is not among them makes one refetch, at
///   most once per ``refetchInterval`` per issuer, so a flood of made-up `kid`s cannot turn the broker into
///   a request amplifier.
/// - When a refetch fails, keys fetched within ``staleFor`` are still used: a CI platform's brief outage
///   does not stop every job; with nothing cached, the exchange fails.
package final class IssuerDirectory: Sendable {
    package struct Failure: Error, Sendable, CustomStringConvertible {
        package let description: String
        package init(description: String) { self.description = description }
    }

    /// What one fetch brings: the discovery document (empty when the keys came from a configured
    /// `jwks_uri`) and the keys.
    package struct Metadata: Sendable {
        package var document: [String: JSONValue]
        package var keys: JWTKeySet
    }

    private struct Entry {
        var keys: JWTKeySet?
        var document: [String: JSONValue] = [:]
        var fetchedAt: Double = -.infinity
        var lastAttempt: Double = -.infinity
        /// When a token's unknown `kid` last made a fetch: those are what the interval limits (a fetch for
        /// freshness does not use up the next rotation's).
        var lastKidRefetch: Double = -.infinity
        /// The fetch under way; concurrent requests wait for it rather than fail or fetch again.
        var inFlight: Task<Result<Metadata, Failure>, Never>?
    }

    private let cache = Mutex<[String: Entry]>([:])
    private let http: @Sendable () -> any HTTPTransport
    private let clock: any WallClock
    private let logger: Logger
    let freshFor: Double
    let refetchInterval: Double
    let staleFor: Double = 24 * 3600
    /// Whether fetches may reach only public addresses (``HTTPClientRequest/publicAddressesOnly``): for URLs
    /// someone other than the operator chose (an app that registered itself names its own `jwks_uri`).
    let publicAddressesOnly: Bool

    package init(
        http: @escaping @Sendable () -> any HTTPTransport,
        clock: any WallClock,
        logger: Logger,
        freshFor: Double = 600,
        refetchInterval: Double = 5,
        publicAddressesOnly: Bool = false
    ) {
        self.publicAddressesOnly = publicAddressesOnly
        self.http = http
        self.clock = clock
        self.logger = logger
        self.freshFor = freshFor
        self.refetchInterval = refetchInterval
    }

    /// Keys of `issuer` that should include `kid` (when the token names one).
    package func keys(issuer: String, kid: String?, jwksURI: String? = nil) async throws(Failure) -> JWTKeySet {
        try await metadata(issuer: issuer, kid: kid, jwksURI: jwksURI).keys
    }

    /// The discovery document and keys of `issuer`; with `jwksURI`, the keys come from there and discovery is
    /// not fetched (a provider configured with explicit endpoints).
    package func metadata(issuer: String, kid: String? = nil, jwksURI: String? = nil) async throws(Failure)
        -> Metadata
    {
        let cacheKey = issuer + "\u{0}" + (jwksURI ?? "")
        let now = clock.now()
        enum Plan {
            case use(Metadata)
            case wait(Task<Result<Metadata, Failure>, Never>)
        }
        let plan: Plan = cache.withLock { entries in
            var entry = entries[cacheKey] ?? Entry()
            if let inFlight = entry.inFlight { return .wait(inFlight) }
            if let keys = entry.keys {
                let fresh = now - entry.fetchedAt < freshFor
                let known = kid.map { keys.keys[$0] != nil } ?? true
                let metadata = Metadata(document: entry.document, keys: keys)
                if fresh && known { return .use(metadata) }
                // A kid we do not know, but one sent us fetching a moment ago; or stale, and we fetched a moment
                // ago: answer from what we have.
                if !known && now - entry.lastKidRefetch < refetchInterval { return .use(metadata) }
                if known && now - entry.lastAttempt < refetchInterval { return .use(metadata) }
                if !known { entry.lastKidRefetch = now }
            }
            let task = Task { () -> Result<Metadata, Failure> in
                do throws(Failure) {
                    return .success(try await self.fetch(issuer: issuer, jwksURI: jwksURI))
                } catch {
                    return .failure(error)
                }
            }
            entry.inFlight = task
            entry.lastAttempt = now
            entries[cacheKey] = entry
            Task { await self.settle(cacheKey: cacheKey, task: task, at: now) }
            return .wait(task)
        }
        switch plan {
        case .use(let metadata):
            return metadata
        case .wait(let task):
            switch await task.value {
            case .success(let metadata):
                return metadata
            case .failure(let error):
                let stale = cache.withLock { $0[cacheKey] }
                if let stale, let keys = stale.keys, now - stale.fetchedAt < staleFor {
                    logger.warning(
                        "trusted issuer unreachable; using its cached keys",
                        metadata: ["broker.issuer": "\(issuer)", "error": "\(error)"]
                    )
                    return Metadata(document: stale.document, keys: keys)
                }
                throw error
            }
        }
    }

    /// Records the outcome of a fetch: new keys replace the cached ones; a failure keeps them.
    private func settle(cacheKey: String, task: Task<Result<Metadata, Failure>, Never>, at started: Double) async {
        let result = await task.value
        cache.withLock { entries in
            var entry = entries[cacheKey] ?? Entry()
            entry.inFlight = nil
            if case .success(let metadata) = result {
                entry.keys = metadata.keys
                entry.document = metadata.document
                entry.fetchedAt = started
            }
            entries[cacheKey] = entry
        }
    }

    private func fetch(issuer: String, jwksURI configured: String?) async throws(Failure) -> Metadata {
        var document: [String: JSONValue] = [:]
        let jwksURI: String
        if let configured {
            jwksURI = configured
        } else {
            let trimmed = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
            let discovery = try await getJSON(trimmed + "/.well-known/openid-configuration", what: "discovery")
            guard let object = discovery.objectValue else {
                throw Failure(description: "the discovery document of \(issuer) is not a JSON object")
            }
            guard object["issuer"]?.stringValue == issuer else {
                throw Failure(
                    description: "the discovery document of \(issuer) names another issuer "
                        + "(\(object["issuer"]?.stringValue.map { String($0.prefix(200)) } ?? "none"))"
                )
            }
            guard let uri = object["jwks_uri"]?.stringValue else {
                throw Failure(description: "the discovery document of \(issuer) has no jwks_uri")
            }
            document = object
            jwksURI = uri
        }
        if let problem = Endpoint.problem(jwksURI) {
            throw Failure(description: "the jwks_uri of \(issuer) \(problem)")
        }
        let body = try await get(jwksURI, what: "JWKS")
        let keys: JWTKeySet
        do {
            keys = try JWTKeySet(jwks: JWKSet.parse(body))
        } catch {
            throw Failure(description: "the JWKS of \(issuer) is not usable: \(error)")
        }
        guard !keys.isEmpty else {
            throw Failure(description: "the JWKS of \(issuer) holds no key this broker can verify with")
        }
        return Metadata(document: document, keys: keys)
    }

    private func getJSON(_ url: String, what: String) async throws(Failure) -> JSONValue {
        guard let value = JSONValue.parse(try await get(url, what: what)) else {
            throw Failure(description: "the \(what) at \(url) is not JSON")
        }
        return value
    }

    private func get(_ url: String, what: String) async throws(Failure) -> [UInt8] {
        var request = HTTPClientRequest(url: url, headers: [(name: "Accept", value: "application/json")])
        request.maxResponseBytes = 512 * 1024
        request.publicAddressesOnly = publicAddressesOnly
        let response: HTTPClientResponse
        do {
            response = try await http().send(request)
        } catch {
            throw Failure(description: "cannot fetch the \(what) at \(url): \(error)")
        }
        guard response.status == 200 else {
            throw Failure(description: "the \(what) at \(url) answered HTTP \(response.status)")
        }
        return response.body
    }
}
