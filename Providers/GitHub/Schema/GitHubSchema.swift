package import BrokerCore
package import ProviderSchemaSupport

/// What `providers.github` accepts: the OAuth app's `client_id` and `client_secret`, and `base_url` for GitHub
/// Enterprise Server (`https://github.example.com`; its API is under `/api/v3`). The module is ``GitHub``
/// (../GitHub.swift); production endpoints: ../production.json.
package enum GitHubSchema {
    package static let id: ProviderID = "github"
    package static let defaultBaseURL = "https://github.com"
    package static let defaultAPIURL = "https://api.github.com"

    /// The API root of a GitHub at `base`: github.com's own host, else Enterprise Server's `/api/v3`.
    package static func apiURL(base: String) -> String {
        base == defaultBaseURL ? defaultAPIURL : base + "/api/v3"
    }

    package static let schema = ProviderSchema(
        id: id,
        displayName: "GitHub",
        keys: [
            ProviderConfigKey("client_id", .text),
            ProviderConfigKey("client_secret", .secret),
            ProviderConfigKey("client_secret_file", .text),
            ProviderConfigKey("base_url", .endpoint, default: defaultBaseURL),
            ProviderConfigKey("api_url", .endpoint, default: defaultAPIURL),
        ],
        check: { section in
            if section.text("client_id") == nil { return ("client_id", "is required: the OAuth app's client id") }
            if let problem = section.oneOf(
                "client_secret", orFile: "client_secret_file",
                missing: ("client_secret", "is required (or client_secret_file)"))
            {
                return problem
            }
            if let base = section.text("base_url"), base.hasSuffix("/") || base.contains("?") {
                return ("base_url", "must be the server's root URL, without a trailing slash or query")
            }
            return nil
        }
    )
}
