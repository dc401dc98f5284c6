package import BrokerCore
import BrokerCrypto
import BrokerHTTPTypes
import GitHubSchema
package import ProviderSupport

/// GitHub (an OAuth app; GitHub does not speak OpenID Connect to OAuth apps): the authorization code flow with
/// PKCE at `{base_url}/login/oauth/authorize`, the exchange at `/login/oauth/access_token` (which answers
/// errors with status 200 and an `error` member), then the REST API: `GET /user` for the numeric `id` — the
/// subject, so a renamed login is the same user — and the name, and `GET /user/emails` for the primary address,
/// trusted only when GitHub says it is verified. GitHub Enterprise Server by `base_url` (its API at
/// `/api/v3`). What the configuration accepts: ``GitHubSchema``.
package enum GitHub {
    package static let id = GitHubSchema.id

    package static let descriptor = ProviderDescriptor(
        schema: GitHubSchema.schema,
        make: { section, context throws(ProviderError) in try GitHubProvider(section, context: context) }
    )
}

/// The GitHub module (see ``GitHub``).
package final class GitHubProvider: IdentityProvider {
    let clientID: String
    let clientSecret: Secret
    let base: EndpointURL
    let api: EndpointURL
    let http: @Sendable () -> any HTTPTransport

    package var id: ProviderID { GitHub.id }

    package init(_ section: ProviderSection, context: ProviderContext) throws(ProviderError) {
        guard let clientID = section.text("client_id"),
            let secret = try context.secret(section, "client_secret", file: "client_secret_file")
        else { throw .invalidResponse("providers.github needs client_id and client_secret") }
        self.clientID = clientID
        clientSecret = secret
        base = try section.endpoint("base_url", default: GitHubSchema.defaultBaseURL)
        api = try section.endpoint("api_url", default: GitHubSchema.apiURL(base: base.url))
        http = context.http
    }

    /// The headers GitHub's REST API asks for (it refuses a request without a `User-Agent`).
    var apiHeaders: [(name: String, value: String)] {
        [
            (name: "Accept", value: "application/vnd.github+json"), (name: "X-GitHub-Api-Version", value: "2022-11-28"),
            (name: "User-Agent", value: "broker"),
        ]
    }

    package func authorizationURL(for pending: PendingSignIn) async throws(ProviderError) -> String {
        try EndpointURL(base.url + "/login/oauth/authorize", name: "providers.github.base_url").with(query: [
            ("client_id", clientID), ("redirect_uri", pending.callbackURL), ("scope", "read:user user:email"),
            ("state", pending.state), ("allow_signup", "true"),
            ("code_challenge", PKCE.challenge(for: pending.codeVerifier)), ("code_challenge_method", "S256"),
        ])
    }

    package func complete(callback: [String: String], pending: PendingSignIn) async throws(ProviderError) -> Identity {
        try OAuth2Support.deniedIfError(callback)
        guard let code = callback["code"], !code.isEmpty else {
            throw .invalidResponse("the callback carries neither code nor error")
        }
        let tokens = try await OAuth2Support.postForm(
            base.url + "/login/oauth/access_token",
            [
                ("client_id", clientID), ("client_secret", clientSecret.exposed), ("code", code),
                ("redirect_uri", pending.callbackURL), ("code_verifier", pending.codeVerifier),
            ], headers: [(name: "Accept", value: "application/json"), (name: "User-Agent", value: "broker")],
            http: http())
        if let error = tokens["error"]?.stringValue {
            // 200 with {"error": "bad_verification_code", "error_description", "error_uri"}.
            throw .invalidResponse(
                "the code exchange was refused: \(error) \(tokens["error_description"]?.stringValue ?? "")")
        }
        guard let accessToken = tokens["access_token"]?.stringValue, !accessToken.isEmpty else {
            throw .invalidResponse("the token response has no access_token")
        }
        let authorization = (name: "Authorization", value: "Bearer " + accessToken)
        let user = try await get("/user", authorization)
        guard case .object(let profile) = user, case .int(let number)? = profile["id"], number > 0 else {
            throw .invalidResponse("GitHub's /user has no numeric id")
        }
        let emails = try await get("/user/emails", authorization)
        guard case .array(let entries) = emails else {
            throw .invalidResponse("GitHub's /user/emails is not a list")
        }
        let primary = entries.first { $0["primary"]?.boolValue == true }
        let verified = primary?["verified"]?.boolValue == true
        let email = verified ? primary?["email"]?.stringValue : nil
        let name = profile["name"]?.stringValue ?? profile["login"]?.stringValue
        // The login as preferred_username (it can change hands, so never the subject) and the avatar as picture.
        var standard: [String: JSONValue] = [:]
        standard["preferred_username"] = profile["login"]
        standard["picture"] = profile["avatar_url"]
        return Identity(
            subject: String(number), email: email, emailVerified: email != nil, name: name,
            profile: Identity.profile(from: standard))
    }

    /// `GET {api}{path}` as JSON of any shape (`/user/emails` is an array).
    func get(_ path: String, _ authorization: (name: String, value: String)) async throws(ProviderError) -> JSONValue {
        try await OAuth2Support.getValue(api.url + path, headers: apiHeaders + [authorization], http: http())
    }
}
