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

    /// A JSON GET whose answer may be any JSON value (GitHub's `/user/emails` is an array); `headers` may name
    /// their own `Accept`.
    package static func getValue(
        _ url: String, headers: [(name: String, value: String)], http: any HTTPTransport
    ) async throws(ProviderError) -> JSONValue {
        let accept =
            headers.contains { $0.name.lowercased() == "accept" } ? [] : [(name: "Accept", value: "application/json")]
        var request = HTTPClientRequest(url: url, headers: headers + accept)
        return try await sendValue(&request, http: http)
    }

    static func send(_ request: inout HTTPClientRequest, http: any HTTPTransport) async throws(ProviderError)
        -> [String: JSONValue]
    {
        guard let body = try await sendValue(&request, http: http).objectValue else {
            throw .invalidResponse("\(request.url.prefix { $0 != "?" }) refused: HTTP 200 ")
        }
        return body
    }

    /// The request sent, its 200 answer parsed as JSON; any other status (or no JSON) a refusal naming the
    /// provider's error.
    static func sendValue(_ request: inout HTTPClientRequest, http: any HTTPTransport) async throws(ProviderError)
        -> JSONValue
    {
        if let problem = Endpoint.problem(request.url) { throw .invalidResponse("\(request.url) \(problem)") }
        request.maxResponseBytes = 256 * 1024
        let response: HTTPClientResponse
        do {
            response = try await http.send(request)
        } catch {
            throw .unavailable("\(request.url.prefix { $0 != "?" }): \(error)")
        }
        let value = JSONValue.parse(response.body)
        guard response.status == 200, let value else {
            // OAuth errors ({"error", "error_description"}), Graph errors ({"error": {"message"}}), X's
            // ({"detail"}) and GitHub's REST API ({"message"}).
            let body = value?.objectValue
            let error = body?["error"]
            let code = error?.stringValue ?? error?["type"]?.stringValue ?? "HTTP \(response.status)"
            let description =
                body?["error_description"]?.stringValue ?? error?["message"]?.stringValue
                ?? body?["detail"]?.stringValue ?? body?["message"]?.stringValue ?? ""
            throw .invalidResponse("\(request.url.prefix { $0 != "?" }) refused: \(code) \(description)")
        }
        return value
    }

    /// The provider's `error` callback parameters as a refusal.
    package static func deniedIfError(_ callback: [String: String]) throws(ProviderError) {
        if let error = callback["error"] {
            throw .denied(
                code: error, description: callback["error_description"] ?? callback["error_reason"] ?? "")
        }
    }
}
