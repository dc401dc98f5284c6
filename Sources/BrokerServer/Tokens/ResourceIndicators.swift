import BrokerConfiguration
import BrokerCore
import BrokerStore

/// Resource indicators (RFC 8707, issue "Tokens for every door"): a request that names `resource` gets an access
/// token whose `aud` is that resource — one the operator registered (`broker resource add`) — and nothing else;
/// a resource that is not registered is `invalid_target`. One `resource` per request (a repeated parameter is
/// refused as every repeated parameter is).
package enum ResourceIndicators {
    static let invalidTarget = OAuthErrorCode("invalid_target")

    /// The longest resource indicator accepted.
    static let maxLength = 2048

    /// Why `url` cannot be a resource indicator, or `nil`: an absolute `https` URI (or `http` on a loopback host,
    /// for local APIs and tests), with a host, without a fragment (RFC 8707 §2), whitespace or controls.
    package static func problem(_ url: String) -> String? {
        guard !url.isEmpty, url.utf8.count <= maxLength else { return "a resource is 1–\(maxLength) characters" }
        guard url.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F && $0.isASCII }) else {
            return "a resource has no spaces, control or non-ASCII characters"
        }
        guard !url.contains("#") else { return "a resource has no fragment (RFC 8707 §2)" }
        let lower = url.lowercased()
        let rest: Substring
        if lower.hasPrefix("https://") {
            rest = url.dropFirst("https://".count)
        } else if lower.hasPrefix("http://") {
            rest = url.dropFirst("http://".count)
            let host = rest.prefix { $0 != "/" && $0 != "?" }
            let name = host.hasPrefix("[") ? host.prefix { $0 != "]" } + "]" : host.prefix { $0 != ":" }
            guard ["127.0.0.1", "[::1]", "localhost"].contains(name.lowercased()) else {
                return "a resource is an https URL (http only on a loopback host)"
            }
        } else {
            return "a resource is an https URL (http only on a loopback host)"
        }
        let host = rest.prefix { $0 != "/" && $0 != "?" }
        guard !host.isEmpty, !host.contains("@") else { return "a resource URL names a host (and no user)" }
        return nil
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
