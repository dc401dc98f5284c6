public import BrokerCore
import BrokerCrypto
public import BrokerHTTP
public import OpenIDConnect

/// Facebook Login: the OAuth 2.0 dialog on the versioned Graph URL, the code exchange at
/// `/oauth/access_token`, then `GET /me?fields=id,name,email` with `appsecret_proof` (hex HMAC-SHA256 of
/// the access token under the app secret), which Graph requires of server-side calls when the app enables
/// "Require App Secret". The subject is the app-scoped numeric `id`. Graph returns `email` only when the
/// address is confirmed, so it counts as verified.
public final class FacebookProvider: IdentityProvider {
    public static let graphVersion = "v19.0"
    public static let defaults: [String: String] = [
        "authorization_endpoint": "https://www.facebook.com/\(graphVersion)/dialog/oauth",
        "token_endpoint": "https://graph.facebook.com/\(graphVersion)/oauth/access_token",
        "userinfo_endpoint": "https://graph.facebook.com/\(graphVersion)/me",
    ]

    let appID: String
    let appSecret: Secret
    let endpoints: [String: String]
    let http: @Sendable () -> any HTTPTransport

    public var id: ProviderID { .facebook }

    public init(
        _ section: [String: JSONValue], http: @escaping @Sendable () -> any HTTPTransport = { HTTPClient.shared }
    )
        throws(ProviderError)
    {
        (appID, appSecret, endpoints) = try OAuth2Support.settings(
            section, provider: "facebook", defaults: Self.defaults)
        self.http = http
    }

    public func authorizationURL(for pending: PendingSignIn) async throws(ProviderError) -> String {
        let base = endpoints["authorization_endpoint"]!
        return base + "?"
            + FormEncoding.encode([
                ("client_id", appID), ("redirect_uri", pending.callbackURL), ("state", pending.state),
                ("response_type", "code"), ("scope", "public_profile,email"),
            ])
    }

    public func complete(callback: [String: String], pending: PendingSignIn) async throws(ProviderError) -> Identity {
        try OAuth2Support.deniedIfError(callback)
        guard let code = callback["code"], !code.isEmpty else {
            throw .invalidResponse("the callback carries neither code nor error")
        }
        // POST rather than the documented GET, so that the app secret is not in a URL.
        let tokens = try await OAuth2Support.postForm(
            endpoints["token_endpoint"]!,
            [
                ("client_id", appID), ("client_secret", appSecret.exposed), ("redirect_uri", pending.callbackURL),
                ("code", code),
            ], http: http())
        guard let accessToken = tokens["access_token"]?.stringValue, !accessToken.isEmpty else {
            throw .invalidResponse("the token response has no access_token")
        }
        let proof = HMAC.authenticate(.sha256, key: Array(appSecret.exposed.utf8), data: Array(accessToken.utf8))
            .hexString
        let me = try await OAuth2Support.getJSON(
            endpoints["userinfo_endpoint"]! + "?"
                + FormEncoding.encode([("fields", "id,name,email"), ("appsecret_proof", proof)]),
            headers: [(name: "Authorization", value: "Bearer " + accessToken)], http: http())
        guard let id = me["id"]?.stringValue, !id.isEmpty, id.utf8.count <= 64, id.allSatisfy(\.isNumber) else {
            throw .invalidResponse("Graph /me has no numeric id")
        }
        let email = me["email"]?.stringValue
        return Identity(subject: id, email: email, emailVerified: email != nil, name: me["name"]?.stringValue)
    }
}
