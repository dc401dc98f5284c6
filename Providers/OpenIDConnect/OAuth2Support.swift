public import BrokerCore
import BrokerCrypto
public import BrokerHTTP

/// Plumbing shared by the plain OAuth 2.0 modules (Facebook, Twitter/X): form posts and JSON GETs with
/// bounded sizes and timeouts, and the provider's error bodies turned into ``ProviderError``.
public enum OAuth2Support {
    public static func postForm(
        _ url: String, _ fields: [(String, String)], headers: [(name: String, value: String)] = [],
        http: any HTTPTransport
    ) async throws(ProviderError) -> [String: JSONValue] {
        var request = HTTPClientRequest.form(url: url, fields: fields, headers: headers)
        return try await send(&request, http: http)
    }

    public static func getJSON(
        _ url: String, headers: [(name: String, value: String)] = [], http: any HTTPTransport
    ) async throws(ProviderError) -> [String: JSONValue] {
        var request = HTTPClientRequest(url: url, headers: headers + [(name: "Accept", value: "application/json")])
        return try await send(&request, http: http)
    }

    static func send(_ request: inout HTTPClientRequest, http: any HTTPTransport) async throws(ProviderError)
        -> [String: JSONValue]
    {
        if let problem = Endpoint.problem(request.url) { throw .invalidResponse("\(request.url) \(problem)") }
        request.connectTimeout = .seconds(10)
        request.timeout = .seconds(20)
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

    /// A module's two secrets and its endpoints from its config section: `idKey`/`secretKey` required, each
    /// endpoint the section's override or the production default.
    public static func settings(
        _ section: [String: JSONValue], provider: String, idKey: String = "client_id",
        secretKey: String = "client_secret", defaults: [String: String]
    ) throws(ProviderError) -> (id: String, secret: Secret, endpoints: [String: String]) {
        guard let id = section[idKey]?.stringValue, !id.isEmpty,
            let secret = section[secretKey]?.stringValue, !secret.isEmpty
        else { throw .invalidResponse("providers.\(provider) needs \(idKey) and \(secretKey)") }
        var endpoints = defaults
        for key in defaults.keys { if let value = section[key]?.stringValue { endpoints[key] = value } }
        return (id, Secret(secret), endpoints)
    }

    /// The provider's `error` callback parameters as a refusal.
    public static func deniedIfError(_ callback: [String: String]) throws(ProviderError) {
        if let error = callback["error"] {
            throw .denied(
                code: error, description: callback["error_description"] ?? callback["error_reason"] ?? "")
        }
    }
}
