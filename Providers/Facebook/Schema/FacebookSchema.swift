package import BrokerCore
package import ProviderSchemaSupport

/// What `providers.facebook` accepts: `client_id`, `client_secret`, the Graph API version and the endpoints
/// on it (../production.json). The module is ``Facebook`` (../Facebook.swift).
package enum FacebookSchema {
    package static let id: ProviderID = "facebook"
    package static let defaultGraphVersion = "v19.0"

    package static func dialog(_ version: String) -> String { "https://www.facebook.com/\(version)/dialog/oauth" }
    package static func graph(_ version: String, _ path: String) -> String {
        "https://graph.facebook.com/\(version)/\(path)"
    }

    /// A Graph API version: `v` then digits, a dot, digits (`v19.0`).
    package static func isGraphVersion(_ text: String) -> Bool {
        let parts = text.dropFirst().split(separator: ".", omittingEmptySubsequences: false)
        return text.hasPrefix("v") && parts.count == 2 && parts.allSatisfy(\.isASCIIDigits)
            && text.utf8.count <= 8
    }

    package static let schema = ProviderSchema(
        id: id,
        displayName: "Facebook",
        keys: [
            ProviderConfigKey("client_id", .text),
            ProviderConfigKey("client_secret", .secret),
            ProviderConfigKey(
                "graph_version", .pattern("a Graph API version such as v19.0", isGraphVersion),
                default: defaultGraphVersion),
            ProviderConfigKey("authorization_endpoint", .endpoint, default: dialog(defaultGraphVersion)),
            ProviderConfigKey("token_endpoint", .endpoint, default: graph(defaultGraphVersion, "oauth/access_token")),
            ProviderConfigKey("userinfo_endpoint", .endpoint, default: graph(defaultGraphVersion, "me")),
        ]
    )
}
