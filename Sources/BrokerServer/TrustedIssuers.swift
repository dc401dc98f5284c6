import BrokerCore
import BrokerCrypto
import BrokerHTTP
import Logging
import Synchronization

/// The signing keys of the CI platforms clients trust (GitHub Actions, GitLab, …), found through each
/// issuer's OpenID discovery document and JWKS, and cached.
///
/// - Discovery must name exactly the configured issuer (OpenID Connect Discovery §4.3), and its
///   `jwks_uri` must be https (http only on a loopback host).
/// - Keys are kept for ``freshFor`` seconds; a token whose `kid` is not among them makes one refetch, at
///   most once per ``refetchInterval`` per issuer, so a flood of made-up `kid`s cannot turn the broker into
///   a request amplifier.
/// - When a refetch fails, keys fetched within ``staleFor`` are still used: a CI platform's brief outage
///   does not stop every job; with nothing cached, the exchange fails.
final class TrustedIssuerKeys: Sendable {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    private struct Entry {
        var keys: JWTKeySet?
        var fetchedAt: Double = -.infinity
        var lastAttempt: Double = -.infinity
        /// The fetch under way; concurrent requests wait for it rather than fail or fetch again.
        var inFlight: Task<Result<JWTKeySet, Failure>, Never>?
    }

    private let cache = Mutex<[String: Entry]>([:])
    private let http: @Sendable () -> HTTPClient
    private let clock: @Sendable () -> Double
    private let logger: Logger
    let freshFor: Double
    let refetchInterval: Double
    let staleFor: Double = 24 * 3600

    init(
        http: @escaping @Sendable () -> HTTPClient,
        clock: @escaping @Sendable () -> Double,
        logger: Logger,
        freshFor: Double = 600,
        refetchInterval: Double = 5
    ) {
        self.http = http
        self.clock = clock
        self.logger = logger
        self.freshFor = freshFor
        self.refetchInterval = refetchInterval
    }

    /// Keys of `issuer` that should include `kid` (when the token names one).
    func keys(issuer: String, kid: String?) async throws(Failure) -> JWTKeySet {
        let now = clock()
        enum Plan {
            case use(JWTKeySet)
            case wait(Task<Result<JWTKeySet, Failure>, Never>)
        }
        let plan: Plan = cache.withLock { entries in
            var entry = entries[issuer] ?? Entry()
            if let inFlight = entry.inFlight { return .wait(inFlight) }
            if let keys = entry.keys {
                let fresh = now - entry.fetchedAt < freshFor
                let known = kid.map { keys.keys[$0] != nil } ?? true
                if fresh && known { return .use(keys) }
                // Stale, or a kid we do not know, but we fetched a moment ago: answer from what we have.
                if now - entry.lastAttempt < refetchInterval { return .use(keys) }
            }
            let task = Task { () -> Result<JWTKeySet, Failure> in
                do throws(Failure) {
                    return .success(try await self.fetch(issuer: issuer))
                } catch {
                    return .failure(error)
                }
            }
            entry.inFlight = task
            entry.lastAttempt = now
            entries[issuer] = entry
            Task { await self.settle(issuer: issuer, task: task, at: now) }
            return .wait(task)
        }
        switch plan {
        case .use(let keys):
            return keys
        case .wait(let task):
            switch await task.value {
            case .success(let keys):
                return keys
            case .failure(let error):
                let stale = cache.withLock { $0[issuer] }
                if let keys = stale?.keys, let fetchedAt = stale?.fetchedAt, now - fetchedAt < staleFor {
                    logger.warning(
                        "trusted issuer unreachable; using its cached keys",
                        metadata: ["broker.issuer": "\(issuer)", "error": "\(error)"]
                    )
                    return keys
                }
                throw error
            }
        }
    }

    /// Records the outcome of a fetch: new keys replace the cached ones; a failure keeps them.
    private func settle(issuer: String, task: Task<Result<JWTKeySet, Failure>, Never>, at started: Double) async {
        let result = await task.value
        cache.withLock { entries in
            var entry = entries[issuer] ?? Entry()
            entry.inFlight = nil
            if case .success(let keys) = result {
                entry.keys = keys
                entry.fetchedAt = started
            }
            entries[issuer] = entry
        }
    }

    private func fetch(issuer: String) async throws(Failure) -> JWTKeySet {
        let trimmed = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        let discovery = try await getJSON(trimmed + "/.well-known/openid-configuration", what: "discovery")
        guard let document = discovery.objectValue else {
            throw Failure(description: "the discovery document of \(issuer) is not a JSON object")
        }
        guard document["issuer"]?.stringValue == issuer else {
            throw Failure(
                description: "the discovery document of \(issuer) names another issuer "
                    + "(\(document["issuer"]?.stringValue.map { String($0.prefix(200)) } ?? "none"))"
            )
        }
        guard let jwksURI = document["jwks_uri"]?.stringValue else {
            throw Failure(description: "the discovery document of \(issuer) has no jwks_uri")
        }
        if let problem = ServerConfiguration.endpointProblem(jwksURI) {
            throw Failure(description: "the jwks_uri of \(issuer) \(problem)")
        }
        let jwksDocument = try await getJSON(jwksURI, what: "JWKS")
        let keys: JWTKeySet
        do {
            keys = try JWTKeySet(jwks: JWKSet.parse(Array(jwksDocument.serialized().utf8)))
        } catch {
            throw Failure(description: "the JWKS of \(issuer) is not usable: \(error)")
        }
        guard !keys.isEmpty else {
            throw Failure(description: "the JWKS of \(issuer) holds no key this broker can verify with")
        }
        return keys
    }

    private func getJSON(_ url: String, what: String) async throws(Failure) -> JSONValue {
        var request = HTTPRequest(url: url, headers: [(name: "Accept", value: "application/json")])
        request.connectTimeout = .seconds(5)
        request.timeout = .seconds(10)
        request.maxResponseBytes = 512 * 1024
        let response: HTTPResponse
        do {
            response = try await http().send(request)
        } catch {
            throw Failure(description: "cannot fetch the \(what) at \(url): \(error)")
        }
        guard response.status == 200 else {
            throw Failure(description: "the \(what) at \(url) answered HTTP \(response.status)")
        }
        guard let value = JSONValue.parse(response.body) else {
            throw Failure(description: "the \(what) at \(url) is not JSON")
        }
        return value
    }
}
