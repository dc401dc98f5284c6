package import BrokerCore
package import ProviderSchemaSupport

/// What `providers.apple` accepts: `client_id` (the Services ID), `team_id`, `key_id` and the `.p8` key that
/// signs the client secret — `private_key_file`, or `private_key` (its text, meant for
/// `BROKER_PROVIDERS_APPLE_PRIVATE_KEY`; never on a command line) — and the issuer and endpoints with their
/// production values (../production.json). The module is ``Apple`` (../Apple.swift).
package enum AppleSchema {
    package static let id: ProviderID = "apple"
    package static let defaultIssuer = "https://appleid.apple.com"
    /// The `aud` of the client secret: Apple's, whichever issuer the section names.
    package static let clientSecretAudience = "https://appleid.apple.com"
    package static let defaults: [String: String] = [
        "issuer": defaultIssuer,
        "authorization_endpoint": "https://appleid.apple.com/auth/authorize",
        "token_endpoint": "https://appleid.apple.com/auth/token",
        "jwks_uri": "https://appleid.apple.com/auth/keys",
    ]

    /// Apple's ids: ten upper-case letters or digits (team ids, key ids).
    package static func isAppleID(_ text: String) -> Bool {
        text.utf8.count == 10 && text.utf8.allSatisfy { $0.isASCIIDigit || ($0 >= 0x41 && $0 <= 0x5A) }
    }

    package static let schema = ProviderSchema(
        id: id,
        displayName: "Apple",
        keys: [
            ProviderConfigKey("client_id", .text),
            ProviderConfigKey("team_id", .pattern("a 10-character Apple team id", isAppleID)),
            ProviderConfigKey("key_id", .pattern("a 10-character Apple key id", isAppleID)),
            ProviderConfigKey("private_key_file", .text),
            ProviderConfigKey("private_key", .secret),
        ] + defaults.sorted { $0.key < $1.key }.map { ProviderConfigKey($0.key, .endpoint, default: $0.value) },
        check: { section in
            for key in ["client_id", "team_id", "key_id"] where section.text(key) == nil {
                return (key, "is required")
            }
            return section.oneOf(
                "private_key", orFile: "private_key_file",
                missing: ("private_key_file", "is required: the .p8 key (or private_key from the environment)"))
        }
    )
}
