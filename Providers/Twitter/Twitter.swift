public import BrokerCore
import BrokerCrypto
public import BrokerHTTP
public import OpenIDConnect

/// Twitter / X with OAuth 2.0: authorization code + PKCE as a confidential client (HTTP Basic at the token
/// endpoint; scopes `users.read tweet.read`), then `GET /2/users/me`. The subject is the numeric user id;
/// X shares no email through this API.
public final class TwitterProvider: IdentityProvider {
    public static let defaults: [String: String] = [
        "authorization_endpoint": "https://x.com/i/oauth2/authorize",
        "token_endpoint": "https://api.x.com/2/oauth2/token",
        "userinfo_endpoint": "https://api.x.com/2/users/me",
    ]

    let clientID: String
    let clientSecret: Secret
    let endpoints: [String: String]
    let http: @Sendable () -> any HTTPTransport

    public var id: ProviderID { .twitter }

    public init(
        _ section: [String: JSONValue], http: @escaping @Sendable () -> any HTTPTransport = { HTTPClient.shared }
    )
        throws(ProviderError)
    {
        (clientID, clientSecret, endpoints) = try OAuth2Support.settings(
            section, provider: "twitter", defaults: Self.defaults)
        self.http = http
    }

    public func authorizationURL(for pending: PendingSignIn) async throws(ProviderError) -> String {
        endpoints["authorization_endpoint"]! + "?"
            + FormEncoding.encode([
                ("response_type", "code"), ("client_id", clientID), ("redirect_uri", pending.callbackURL),
                ("scope", "users.read tweet.read"), ("state", pending.state),
                ("code_challenge", PKCE.challenge(for: pending.codeVerifier)), ("code_challenge_method", "S256"),
            ])
    }

    public func complete(callback: [String: String], pending: PendingSignIn) async throws(ProviderError) -> Identity {
        try OAuth2Support.deniedIfError(callback)
        guard let code = callback["code"], !code.isEmpty else {
            throw .invalidResponse("the callback carries neither code nor error")
        }
        let tokens = try await OAuth2Support.postForm(
            endpoints["token_endpoint"]!,
            [
                ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", pending.callbackURL),
                ("code_verifier", pending.codeVerifier),
            ],
            headers: [HTTPBasic.header(id: clientID, secret: clientSecret)], http: http())
        guard let accessToken = tokens["access_token"]?.stringValue, !accessToken.isEmpty else {
            throw .invalidResponse("the token response has no access_token")
        }
        let me = try await OAuth2Support.getJSON(
            endpoints["userinfo_endpoint"]!, headers: [(name: "Authorization", value: "Bearer " + accessToken)],
            http: http())
        guard let data = me["data"]?.objectValue, let id = data["id"]?.stringValue, !id.isEmpty, id.utf8.count <= 32,
            id.allSatisfy(\.isNumber)
        else { throw .invalidResponse("/2/users/me has no numeric id") }
        return Identity(subject: id, email: nil, emailVerified: false, name: data["name"]?.stringValue)
    }
}
