package import BrokerCore
package import ProviderSchemaSupport

/// What a provider of `"type": "oidc"` accepts — any OpenID Connect provider by its issuer (GitLab, Keycloak,
/// Okta, Entra ID, authentik, another broker), under an id of the operator's choosing, as many as configured.
/// The module is ``OIDC`` (../OIDC.swift).
package enum OIDCSchema {
    package static let type: ProviderID = "oidc"
    package static let defaultScopes = ["openid", "email", "profile"]
    package static let authMethods = ["client_secret_basic", "client_secret_post", "private_key_jwt"]

    package static let schema = ProviderSchema(
        id: type,
        displayName: "OpenID Connect",
        typed: true,
        keys: [
            ProviderConfigKey("issuer", .endpoint),
            ProviderConfigKey("client_id", .text),
            ProviderConfigKey("client_secret", .secret),
            ProviderConfigKey("client_secret_file", .text),
            ProviderConfigKey("token_endpoint_auth_method", .choice(authMethods), default: "client_secret_basic"),
            ProviderConfigKey("private_key_file", .text),
            ProviderConfigKey("key_id", .text),
            ProviderConfigKey("scopes", .list("a scope (no spaces)", { !$0.contains(" ") })),
            ProviderConfigKey("display_name", .text),
            ProviderConfigKey("icon_file", .text),
            ProviderConfigKey("email_claim", .text, default: "email"),
            ProviderConfigKey("name_claim", .text, default: "name"),
            ProviderConfigKey("trust_email", .flag),
            ProviderConfigKey("allowed_domains", .list("a domain like example.com", isDomain)),
            ProviderConfigKey("required_claims", .list("claim=value", isClaimRule)),
            ProviderConfigKey("authorization_endpoint", .endpoint),
            ProviderConfigKey("token_endpoint", .endpoint),
            ProviderConfigKey("jwks_uri", .endpoint),
            ProviderConfigKey("userinfo_endpoint", .endpoint),
        ],
        check: check
    )

    static func check(_ section: ProviderSection) -> (key: String, problem: String)? {
        if section.text("issuer") == nil { return ("issuer", "is required: the provider's issuer URL") }
        if section.text("client_id") == nil { return ("client_id", "is required") }
        let method = section.text("token_endpoint_auth_method") ?? "client_secret_basic"
        let secrets = ["client_secret", "client_secret_file"].filter { section.text($0) != nil }
        if method == "private_key_jwt" {
            if section.text("private_key_file") == nil {
                return ("private_key_file", "is required with private_key_jwt: the PEM key the client signs with")
            }
            if let key = secrets.first { return (key, "is not used with private_key_jwt; remove it") }
        } else {
            if let problem = section.oneOf(
                "client_secret", orFile: "client_secret_file",
                missing: ("client_secret", "is required (or client_secret_file, or private_key_jwt)"))
            {
                return problem
            }
            if section.text("private_key_file") != nil {
                return ("private_key_file", "needs token_endpoint_auth_method private_key_jwt")
            }
        }
        if let scopes = section.values["scopes"]?.arrayValue, !scopes.contains(where: { $0.stringValue == "openid" }) {
            return ("scopes", "must include openid")
        }
        return nil
    }

    /// A DNS name: labels of letters, digits and hyphens, at least one dot.
    package static func isDomain(_ text: String) -> Bool {
        let labels = text.split(separator: ".", omittingEmptySubsequences: false)
        return labels.count >= 2 && text.utf8.count <= 253
            && labels.allSatisfy { label in
                !label.isEmpty && label.utf8.count <= 63 && label.first != "-" && label.last != "-"
                    && label.utf8.allSatisfy {
                        $0.isASCIILowercase || $0.isASCIIDigit || $0 == UInt8(ascii: "-")
                    }
            }
    }

    /// `claim=value`: a claim name without `=`, and the value it must have (or hold, for a list claim).
    package static func isClaimRule(_ text: String) -> Bool {
        guard let equals = text.firstIndex(of: "=") else { return false }
        return equals != text.startIndex && text.index(after: equals) != text.endIndex
    }
}
