package import BrokerCore
package import ProviderSchemaSupport

/// What `providers.google` accepts: `client_id`, `client_secret`, and the issuer and endpoints with their
/// production values (../production.json). The module is ``Google`` (../Google.swift).
package enum GoogleSchema {
    package static let id: ProviderID = "google"
    package static let defaultIssuer = "https://accounts.google.com"
    package static let defaults: [String: String] = [
        "issuer": defaultIssuer,
        "authorization_endpoint": "https://accounts.google.com/o/oauth2/v2/auth",
        "token_endpoint": "https://oauth2.googleapis.com/token",
        "jwks_uri": "https://www.googleapis.com/oauth2/v3/certs",
        "userinfo_endpoint": "https://openidconnect.googleapis.com/v1/userinfo",
    ]

    package static let schema = ProviderSchema(
        id: id,
        displayName: "Google",
        keys: [ProviderConfigKey("client_id", .text), ProviderConfigKey("client_secret", .secret)]
            + defaults.sorted { $0.key < $1.key }.map { ProviderConfigKey($0.key, .endpoint, default: $0.value) }
    )
}
