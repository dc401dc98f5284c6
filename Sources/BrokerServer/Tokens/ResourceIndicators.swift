import BrokerConfiguration
import BrokerCore
import BrokerStore
import ProviderSupport

/// Resource indicators (RFC 8707, issue "Tokens for every door"): a request that names `resource` gets an access
/// token whose `aud` is that resource — one the operator registered (`broker resource add`) — and nothing else;
/// a resource that is not registered is `invalid_target`. One `resource` per request (a repeated parameter is
/// refused as every repeated parameter is).
package enum ResourceIndicators {
    static let invalidTarget = OAuthErrorCode("invalid_target")

    /// The longest resource indicator accepted.
    static let maxLength = 2048

    /// Why `url` cannot be a resource indicator, or `nil`: a URL of the contract's endpoint rule
    /// (``Endpoint/problem(_:)``: `https`, or `http` on a loopback host, a host and no user information), at most
    /// ``maxLength`` characters, without a fragment (RFC 8707 §2), whitespace, controls or non-ASCII characters.
    package static func problem(_ url: String) -> String? {
        guard !url.isEmpty, url.utf8.count <= maxLength else { return "a resource is 1–\(maxLength) characters" }
        guard url.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F && $0.isASCII }) else {
            return "a resource has no spaces, control or non-ASCII characters"
        }
        guard !url.contains("#") else { return "a resource has no fragment (RFC 8707 §2)" }
        return Endpoint.problem(url).map { "a resource URL \($0)" }
    }

    /// The registered resource the request's `resource` names, `nil` when it names none.
    /// - Throws: `invalid_target` (400) for a malformed or unregistered resource.
    static func named(_ value: String?, store: any Store) async throws -> ResourceRecord? {
        guard let value else { return nil }
        if let problem = problem(value) { throw APIError(status: 400, code: invalidTarget, detail: problem) }
        guard let resource = try await store.resource(url: value) else {
            throw APIError(
                status: 400, code: invalidTarget,
                detail: "\(value.prefix(256)) is not a resource this broker issues tokens for")
        }
        return resource
    }
}
