package import BrokerCore
package import ProviderSchemaSupport

/// What `providers.twitter` accepts: the mode (OAuth 2.0 or 1.0a), each mode's credentials and endpoints
/// (../production.json), and the rule that OAuth 1.0a needs its consumer key and secret. The module
/// is ``Twitter`` (../Twitter.swift).
package enum TwitterSchema {
    package static let id: ProviderID = "twitter"

    /// The OAuth 2.0 endpoints.
    package static let oauth2Defaults: [String: String] = [
        "authorization_endpoint": "https://x.com/i/oauth2/authorize",
        "token_endpoint": "https://api.x.com/2/oauth2/token",
        "userinfo_endpoint": "https://api.x.com/2/users/me",
    ]

    /// The OAuth 1.0a endpoints.
    package static let oauth1Defaults: [String: String] = [
        "request_token_endpoint": "https://api.x.com/oauth/request_token",
        "authorize_endpoint": "https://api.x.com/oauth/authorize",
        "access_token_endpoint": "https://api.x.com/oauth/access_token",
        "verify_credentials_endpoint": "https://api.x.com/1.1/account/verify_credentials.json",
    ]

    package static let schema = ProviderSchema(
        id: id,
        displayName: "Twitter / X",
        keys: [
            ProviderConfigKey("mode", .choice(["oauth2", "oauth1"]), default: "oauth2"),
            ProviderConfigKey("client_id", .text),
            ProviderConfigKey("client_secret", .secret),
            ProviderConfigKey("consumer_key", .text),
            ProviderConfigKey("consumer_secret", .secret),
        ]
            + oauth2Defaults.sorted { $0.key < $1.key }.map { ProviderConfigKey($0.key, .endpoint, default: $0.value) }
            + oauth1Defaults.sorted { $0.key < $1.key }.map { ProviderConfigKey($0.key, .endpoint, default: $0.value) },
        check: { section in
            guard section.text("mode") == "oauth1" else { return nil }
            for key in ["consumer_key", "consumer_secret"] where section.text(key) == nil {
                return (key, "is required with \"mode\": \"oauth1\"")
            }
            return nil
        }
    )
}
