package import BrokerCore
import GoogleSchema
package import OpenIDConnect
package import ProviderSupport

/// Google: OpenID Connect with issuer `https://accounts.google.com`. Google's ID tokens carry either
/// `https://accounts.google.com` or `accounts.google.com` as `iss`, both accepted for the default issuer;
/// `aud` must be our client id, `azp` is checked when present, and an email counts only with
/// `email_verified`. Production endpoints: production.json beside this file (kept equal to ``defaults``); what the
/// configuration accepts: ``GoogleSchema``.
package enum Google {
    package static let id = GoogleSchema.id
    package static let defaultIssuer = GoogleSchema.defaultIssuer
    package static let defaults = GoogleSchema.defaults

    package static let descriptor = ProviderDescriptor(
        schema: GoogleSchema.schema,
        make: { section, context throws(ProviderError) in
            OpenIDConnectProvider(
                configuration: try configuration(section), directory: context.directory, http: context.http,
                clock: context.clock)
        }
    )

    /// The module's configuration from the broker's `providers.google` section: `client_id`,
    /// `client_secret`, and optional `issuer` and endpoint overrides. With a non-default `issuer` (an
    /// emulator), endpoints not given come from that issuer's discovery. (`userinfo_endpoint` is accepted as
    /// the contract names it; the ID token already carries everything the broker keeps.)
    package static func configuration(_ section: ProviderSection) throws(ProviderError) -> OpenIDConnectConfiguration {
        let (clientID, secret) = try section.credentials("client_id", "client_secret")
        let issuer = section.text("issuer") ?? defaultIssuer
        var configuration = OpenIDConnectConfiguration(
            id: id, clientID: clientID, clientSecret: secret, issuer: issuer)
        let useDefaults = issuer == defaultIssuer
        func endpoint(_ key: String) throws(ProviderError) -> EndpointURL? {
            if let configured = try section.endpointIfSet(key) { return configured }
            guard useDefaults, let fallback = defaults[key] else { return nil }
            return try EndpointURL(fallback, name: "providers.google.\(key)")
        }
        configuration.authorizationEndpoint = try endpoint("authorization_endpoint")
        configuration.tokenEndpoint = try endpoint("token_endpoint")
        configuration.jwksURI = try endpoint("jwks_uri")
        if useDefaults { configuration.acceptedIssuers = [defaultIssuer, "accounts.google.com"] }
        return configuration
    }
}
