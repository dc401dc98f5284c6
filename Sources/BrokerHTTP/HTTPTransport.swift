/// What sends an outbound HTTP request: ``HTTPClient`` (libcurl) in production, scripted answers in tests.
///
/// Provider modules, the token exchange's discovery and JWKS cache, and the CLI's broker API take a transport
/// rather than the libcurl client, so each can be exercised against canned exchanges as well as real servers.
package protocol HTTPTransport: Sendable {
    /// Performs `request` and returns the final response, whatever its status.
    ///
    /// - Throws: ``HTTPClientError`` for transport failures (never for a 4xx or 5xx answer).
    func send(_ request: HTTPClientRequest) async throws -> HTTPClientResponse
}

extension HTTPClient: HTTPTransport {}
