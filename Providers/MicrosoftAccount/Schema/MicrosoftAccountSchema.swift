package import BrokerCore
package import ProviderSchemaSupport

/// What `providers.microsoftaccount` accepts: `client_id`, `client_secret`, the tenant, and the issuer
/// template and endpoint overrides (../production.json). The module is
/// ``MicrosoftAccount`` (../MicrosoftAccount.swift).
package enum MicrosoftAccountSchema {
    package static let id: ProviderID = "microsoftaccount"
    package static let host = "https://login.microsoftonline.com"

    package static let schema = ProviderSchema(
        id: id,
        displayName: "Microsoft account",
        keys: [
            ProviderConfigKey("client_id", .text),
            ProviderConfigKey("client_secret", .secret),
            ProviderConfigKey(
                "tenant", .pattern("consumers, common, organizations or a tenant id", isTenant), default: "consumers"),
            ProviderConfigKey("issuer", .endpoint, default: "\(host)/{tenantid}/v2.0"),
            ProviderConfigKey("authorization_endpoint", .endpoint),
            ProviderConfigKey("token_endpoint", .endpoint),
            ProviderConfigKey("jwks_uri", .endpoint),
            ProviderConfigKey("userinfo_endpoint", .endpoint),
        ]
    )

    package static func isTenant(_ text: String) -> Bool {
        ["consumers", "common", "organizations"].contains(text) || isTenantID(text)
    }

    /// A GUID in its 8-4-4-4-12 hex form.
    package static func isTenantID(_ text: String) -> Bool {
        let groups = text.split(separator: "-", omittingEmptySubsequences: false)
        return groups.map(\.count) == [8, 4, 4, 4, 12] && groups.allSatisfy { $0.allSatisfy(\.isHexDigit) }
    }
}
