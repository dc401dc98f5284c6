package import BrokerCore
import BrokerCrypto
package import BrokerHTTPTypes
package import ProviderSupport
import TwitterSchema

/// Twitter / X: OAuth 2.0 (the default) or, with `"mode": "oauth1"`, OAuth 1.0a.
package enum Twitter {
    package static let id = TwitterSchema.id

    package static let descriptor = ProviderDescriptor(
        schema: TwitterSchema.schema,
        make: { section, context throws(ProviderError) in
            if section.text("mode") == "oauth1" {
                return try TwitterOAuth1Provider(section, http: context.http, clock: context.clock)
            }
            return try TwitterProvider(section, http: context.http)
        }
    )
}

/// Twitter / X with OAuth 2.0: authorization code + PKCE as a confidential client (HTTP Basic at the token
/// endpoint; scopes `users.read tweet.read`), then `GET /2/users/me`. The subject is the numeric user id;
/// X shares no email through this API.
package final class TwitterProvider: IdentityProvider {
    package static let defaults = TwitterSchema.oauth2Defaults

    let clientID: String
    let clientSecret: Secret
    let authorizationEndpoint: EndpointURL
    let tokenEndpoint: EndpointURL
    let userinfoEndpoint: EndpointURL
    let http: @Sendable () -> any HTTPTransport

    package var id: ProviderID { Twitter.id }

    package init(_ section: ProviderSection, http: @escaping @Sendable () -> any HTTPTransport) throws(ProviderError) {
        (clientID, clientSecret) = try section.credentials("client_id", "client_secret")
        func endpoint(_ key: String) throws(ProviderError) -> EndpointURL {
            // The defaults table names every key asked for here; "" would fail the endpoint rule, not crash.
            try section.endpoint(key, default: Self.defaults[key] ?? "")
        }
        authorizationEndpoint = try endpoint("authorization_endpoint")
        tokenEndpoint = try endpoint("token_endpoint")
        userinfoEndpoint = try endpoint("userinfo_endpoint")
        self.http = http
    }

    package func authorizationURL(for pending: PendingSignIn) async throws(ProviderError) -> String {
        authorizationEndpoint.with(query: [
            ("response_type", "code"), ("client_id", clientID), ("redirect_uri", pending.callbackURL),
            ("scope", "users.read tweet.read"), ("state", pending.state),
            ("code_challenge", PKCE.challenge(for: pending.codeVerifier)), ("code_challenge_method", "S256"),
        ])
    }

    package func complete(callback: [String: String], pending: PendingSignIn) async throws(ProviderError) -> Identity {
        try OAuth2Support.deniedIfError(callback)
        guard let code = callback["code"], !code.isEmpty else {
            throw .invalidResponse("the callback carries neither code nor error")
        }
        let tokens = try await OAuth2Support.postForm(
            tokenEndpoint.url,
            [
                ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", pending.callbackURL),
                ("code_verifier", pending.codeVerifier),
            ],
            headers: [HTTPBasic.header(id: clientID, secret: clientSecret)], http: http())
        guard let accessToken = tokens["access_token"]?.stringValue, !accessToken.isEmpty else {
            throw .invalidResponse("the token response has no access_token")
        }
        let me = try await OAuth2Support.getJSON(
            userinfoEndpoint.url, headers: [(name: "Authorization", value: "Bearer " + accessToken)],
            http: http())
        guard let data = me["data"]?.objectValue, let id = data["id"]?.stringValue, id.isASCIIDigits,
            id.utf8.count <= 32
        else { throw .invalidResponse("/2/users/me has no numeric id") }
        return Identity(subject: id, email: nil, emailVerified: false, name: data["name"]?.stringValue)
    }
}
