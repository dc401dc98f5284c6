package import BrokerCore
import BrokerCrypto
package import BrokerHTTPTypes

/// Plumbing shared by the plain OAuth 2.0 modules (Facebook, Twitter/X): form posts and JSON GETs with
/// bounded sizes (the time limit is the transport's: `server.http_timeout`), and the provider's error bodies turned into ``ProviderError``.
package enum OAuth2Support {
    package static func postForm(
        _ url: String, _ fields: [(String, String)], headers: [(name: String, value: String)] = [],
        http: any HTTPTransport
    ) async throws(ProviderError) -> [String: JSONValue] {
        var request = HTTPClientRequest.form(url: url, fields: fields, headers: headers)
        return try await send(&request, http: http)
    }

    package static func getJSON(
        _ url: String, headers: [(name: String, value: String)] = [], http: any HTTPTransport
    ) async throws(ProviderError) -> [String: JSONValue] {
        var request = HTTPClientRequest(url: url, headers: headers + [(name: "Accept", value: "application/json")])
        return try await send(&request, http: http)
    }

    static func send(_ request: inout HTTPClientRequest, http: any HTTPTransport) async throws(ProviderError)
        -> [String: JSONValue]
    {
        if let problem = Endpoint.problem(request.url) { throw .invalidResponse("\(request.url) \(problem)") }
        request.maxResponseBytes = 256 * 1024
        let response: HTTPClientResponse
        do {
            response = try await http.send(request)
        } catch {
            throw .unavailable("\(request.url.prefix { $0 != "?" }): \(error)")
        }
        let body = JSONValue.parse(response.body)?.objectValue
        guard response.status == 200, let body else {
            // OAuth errors ({"error", "error_description"}) and Graph errors ({"error": {"message"}}).
            let error = body?["error"]
            let code = error?.stringValue ?? error?["type"]?.stringValue ?? "HTTP \(response.status)"
            let description =
                body?["error_description"]?.stringValue ?? error?["message"]?.stringValue
                ?? body?["detail"]?.stringValue ?? ""
            throw .invalidResponse("\(request.url.prefix { $0 != "?" }) refused: \(code) \(description)")
        }
        return body
    }

    /// The provider's `error` callback parameters as a refusal.
    package static func deniedIfError(_ callback: [String: String]) throws(ProviderError) {
        if let error = callback["error"] {
            throw .denied(
                code: error, description: callback["error_description"] ?? callback["error_reason"] ?? "")
        }
    }
}
