/// What sends an outbound HTTP request: BrokerHTTP's `HTTPClient` (libcurl) in production, scripted answers in tests.
///
/// Provider modules, the token exchange's discovery and JWKS cache, and the CLI's broker API take a transport
/// rather than the libcurl client, so each can be exercised against canned exchanges as well as real servers.
package protocol HTTPTransport: Sendable {
    /// Performs `request` and returns the final response, whatever its status.
    ///
    /// - Throws: ``HTTPClientError`` for transport failures (never for a 4xx or 5xx answer).
    func send(_ request: HTTPClientRequest) async throws -> HTTPClientResponse
}

/// A transport that gives every request one time limit: the broker's `server.http_timeout` for the calls it
/// makes to sign-in providers and to trusted issuers (discovery, keys, code and token exchanges), so a slow
/// provider is waited for as long as the operator chose — in one place, not per provider.
package struct TimeLimitedTransport: HTTPTransport {
    package let base: any HTTPTransport
    package let timeout: Duration
    /// The operator's CA bundle for every call through this transport (`server.ca_file`), unless the request
    /// names one itself.
    package let caFile: String?

    package init(base: any HTTPTransport, timeout: Duration, caFile: String? = nil) {
        self.base = base
        self.timeout = timeout
        self.caFile = caFile
    }

    package func send(_ request: HTTPClientRequest) async throws -> HTTPClientResponse {
        var request = request
        request.timeout = timeout
        request.connectTimeout = min(timeout, .seconds(10))
        request.caFile = request.caFile ?? caFile
        return try await base.send(request)
    }
}

/// A transport that verifies servers against the operator's CA bundle (`server.ca_file`) unless a request names
/// its own: for the broker's outbound calls that keep their own time limits (back-channel logout).
package struct PrivateCATransport: HTTPTransport {
    package let base: any HTTPTransport
    package let caFile: String?

    package init(base: any HTTPTransport, caFile: String?) {
        self.base = base
        self.caFile = caFile
    }

    package func send(_ request: HTTPClientRequest) async throws -> HTTPClientResponse {
        var request = request
        request.caFile = request.caFile ?? caFile
        return try await base.send(request)
    }
}
