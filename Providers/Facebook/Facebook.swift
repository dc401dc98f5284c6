package import BrokerCore
import BrokerCrypto
package import BrokerHTTPTypes
import FacebookSchema
package import ProviderSupport

/// Facebook Login: the OAuth 2.0 dialog on the versioned Graph URL, the code exchange at
/// `/oauth/access_token`, then `GET /me?fields=id,name,email` with `appsecret_proof` (hex HMAC-SHA256 of
/// the access token under the app secret), which Graph requires of server-side calls when the app enables
/// "Require App Secret". The subject is the app-scoped numeric `id`. Graph returns `email` only when the
/// address is confirmed, so it counts as verified. The dialog carries a PKCE S256 challenge and the exchange
/// its verifier, so that a code is bound to the sign-in that asked for it: a victim's unused code pasted into
/// someone else's sign-in fails at Facebook.
package enum Facebook {
    package static let id = FacebookSchema.id
    package static let defaultGraphVersion = FacebookSchema.defaultGraphVersion

    static func dialog(_ version: String) -> String { FacebookSchema.dialog(version) }
    static func graph(_ version: String, _ path: String) -> String { FacebookSchema.graph(version, path) }

    package static let descriptor = ProviderDescriptor(
        schema: FacebookSchema.schema,
        make: { section, context throws(ProviderError) in try FacebookProvider(section, http: context.http) }
    )
}

/// The Facebook module (see ``Facebook``).
package final class FacebookProvider: IdentityProvider {
    let appID: String
    let appSecret: Secret
    let authorizationEndpoint: EndpointURL
    let tokenEndpoint: EndpointURL
    let userinfoEndpoint: EndpointURL
    let http: @Sendable () -> any HTTPTransport

    package var id: ProviderID { Facebook.id }

    /// - Parameter section: `client_id` (the app id) and `client_secret` (the app secret) are required;
    ///   endpoints not given follow `graph_version` (default v19.0).
    package init(_ section: ProviderSection, http: @escaping @Sendable () -> any HTTPTransport) throws(ProviderError) {
        (appID, appSecret) = try section.credentials("client_id", "client_secret")
        let version = section.text("graph_version") ?? Facebook.defaultGraphVersion
        authorizationEndpoint = try section.endpoint("authorization_endpoint", default: Facebook.dialog(version))
        tokenEndpoint = try section.endpoint("token_endpoint", default: Facebook.graph(version, "oauth/access_token"))
        userinfoEndpoint = try section.endpoint("userinfo_endpoint", default: Facebook.graph(version, "me"))
        self.http = http
    }

    package func authorizationURL(for pending: PendingSignIn) async throws(ProviderError) -> String {
        authorizationEndpoint.with(query: [
            ("client_id", appID), ("redirect_uri", pending.callbackURL), ("state", pending.state),
            ("response_type", "code"), ("scope", "public_profile,email"),
            ("code_challenge", PKCE.challenge(for: pending.codeVerifier)), ("code_challenge_method", "S256"),
        ])
    }

    package func complete(callback: [String: String], pending: PendingSignIn) async throws(ProviderError) -> Identity {
        try OAuth2Support.deniedIfError(callback)
        guard let code = callback["code"], !code.isEmpty else {
            throw .invalidResponse("the callback carries neither code nor error")
        }
        // POST rather than the documented GET, so that the app secret is not in a URL.
        let tokens = try await OAuth2Support.postForm(
            tokenEndpoint.url,
            [
                ("client_id", appID), ("client_secret", appSecret.exposed), ("redirect_uri", pending.callbackURL),
                ("code", code), ("code_verifier", pending.codeVerifier),
            ], http: http())
        guard let accessToken = tokens["access_token"]?.stringValue, !accessToken.isEmpty else {
            throw .invalidResponse("the token response has no access_token")
        }
        let proof = HMAC.authenticate(.sha256, key: Array(appSecret.exposed.utf8), data: Array(accessToken.utf8))
            .hexString
        let me = try await OAuth2Support.getJSON(
            userinfoEndpoint.with(query: [("fields", "id,name,email"), ("appsecret_proof", proof)]),
            headers: [(name: "Authorization", value: "Bearer " + accessToken)], http: http())
        guard let id = me["id"]?.stringValue, id.isASCIIDigits, id.utf8.count <= 64 else {
            throw .invalidResponse("Graph /me has no numeric id")
        }
        let email = me["email"]?.stringValue
        return Identity(subject: id, email: email, emailVerified: email != nil, name: me["name"]?.stringValue)
    }
}
