public import BrokerCore
public import OpenIDConnect

/// Google: OpenID Connect with issuer `https://accounts.google.com`. Google's ID tokens carry either
/// `https://accounts.google.com` or `accounts.google.com` as `iss`, both accepted for the default issuer;
/// `aud` must be our client id, `azp` is checked when present, and an email counts only with
/// `email_verified`. Production endpoints: Config/providers/google.json (kept equal to ``defaults``).
public enum Google {
    public static let defaultIssuer = "https://accounts.google.com"
    public static let defaults: [String: String] = [
        "issuer": defaultIssuer,
        "authorization_endpoint": "https://accounts.google.com/o/oauth2/v2/auth",
        "token_endpoint": "https://oauth2.googleapis.com/token",
        "jwks_uri": "https://www.googleapis.com/oauth2/v3/certs",
        "userinfo_endpoint": "https://openidconnect.googleapis.com/v1/userinfo",
    ]

    /// The module's configuration from the broker's `providers.google` section: `client_id`,
    /// `client_secret`, and optional `issuer` and endpoint overrides. With a non-default `issuer` (an
    /// emulator), endpoints not given come from that issuer's discovery.
    public static func configuration(_ section: [String: JSONValue]) throws(ProviderError) -> OpenIDConnectConfiguration
    {
        guard let clientID = section["client_id"]?.stringValue, !clientID.isEmpty,
            let secret = section["client_secret"]?.stringValue, !secret.isEmpty
        else { throw .invalidResponse("providers.google needs client_id and client_secret") }
        let issuer = section["issuer"]?.stringValue ?? defaultIssuer
        var configuration = OpenIDConnectConfiguration(
            id: .google, clientID: clientID, clientSecret: Secret(secret), issuer: issuer)
        let useDefaults = issuer == defaultIssuer
        func endpoint(_ key: String) -> String? {
            section[key]?.stringValue ?? (useDefaults ? defaults[key] : nil)
        }
        configuration.authorizationEndpoint = endpoint("authorization_endpoint")
        configuration.tokenEndpoint = endpoint("token_endpoint")
        configuration.jwksURI = endpoint("jwks_uri")
        if useDefaults { configuration.acceptedIssuers = [defaultIssuer, "accounts.google.com"] }
        return configuration
    }
}
