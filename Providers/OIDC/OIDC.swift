package import BrokerCore
import BrokerCrypto
import OIDCSchema
package import OpenIDConnect
package import ProviderSupport

/// Any OpenID Connect provider by its issuer (`"type": "oidc"`): discovery, PKCE, nonce, the ID token verified
/// against the issuer's JWKS (refetched on an unknown `kid`, so a rotated key is picked up), userinfo when the
/// ID token lacks the address or name, and `email_verified` honoured before an address is trusted — unless
/// `trust_email` says the upstream vouches for every address it sends (an organisation's own directory, such
/// as Entra ID, which sends no `email_verified`). `allowed_domains` and `required_claims` say who may sign in.
/// What the configuration accepts: ``OIDCSchema``.
package enum OIDC {
    package static let descriptor = ProviderDescriptor(
        schema: OIDCSchema.schema,
        make: { section, context throws(ProviderError) in
            OpenIDConnectProvider(
                configuration: try configuration(section, context: context), directory: context.directory,
                http: context.http, clock: context.clock)
        }
    )

    /// The shared module's configuration from a `providers.<id>` section of type `oidc`.
    package static func configuration(_ section: ProviderSection, context: ProviderContext) throws(ProviderError)
        -> OpenIDConnectConfiguration
    {
        guard let clientID = section.text("client_id"), let issuer = section.text("issuer") else {
            throw .invalidResponse("providers.\(section.id) needs issuer and client_id")
        }
        let method = section.text("token_endpoint_auth_method") ?? "client_secret_basic"
        var authentication = TokenEndpointAuthentication.basic
        var secret = Secret("")
        if method == "private_key_jwt" {
            guard let path = section.text("private_key_file") else {
                throw .invalidResponse("providers.\(section.id).private_key_file is required with private_key_jwt")
            }
            let pem: String
            do throws(ProviderError) {
                pem = try context.readSecretFile(path)
            } catch {
                throw .invalidResponse("providers.\(section.id).private_key_file: \(error.reasonText)")
            }
            let key: AsymmetricKey
            do {
                key = try AsymmetricKey(pem: pem)
            } catch {
                throw .invalidResponse("providers.\(section.id).private_key_file: \(error)")
            }
            guard key.isPrivate, let signer = try? JWTSigner(key: key, kid: section.text("key_id")) else {
                throw .invalidResponse(
                    "providers.\(section.id).private_key_file holds a public key; the client signs with a private one")
            }
            authentication = .privateKeyJWT(signer)
        } else {
            guard let given = try context.secret(section, "client_secret", file: "client_secret_file") else {
                throw .invalidResponse("providers.\(section.id) needs client_secret or client_secret_file")
            }
            secret = given
            if method == "client_secret_post" { authentication = .post }
        }
        var configuration = OpenIDConnectConfiguration(
            id: section.id, clientID: clientID, clientSecret: secret, issuer: issuer)
        configuration.tokenAuthentication = authentication
        configuration.authorizationEndpoint = try section.endpointIfSet("authorization_endpoint")
        configuration.tokenEndpoint = try section.endpointIfSet("token_endpoint")
        configuration.jwksURI = try section.endpointIfSet("jwks_uri")
        configuration.userinfoEndpoint = try section.endpointIfSet("userinfo_endpoint")
        configuration.userinfoFallback = true
        let scopes = section.list("scopes")
        configuration.scopes = scopes.isEmpty ? OIDCSchema.defaultScopes : scopes
        configuration.emailClaim = section.text("email_claim") ?? "email"
        configuration.nameClaim = section.text("name_claim") ?? "name"
        if section.flag("trust_email") {
            let claim = configuration.emailClaim
            configuration.emailVerified = { $0[claim]?.stringValue != nil }
        }
        configuration.admit = admission(
            domains: section.list("allowed_domains").map { $0.lowercased() }, rules: section.list("required_claims"))
        return configuration
    }

    /// Who may sign in: with `domains`, only a verified address in one of them (or a subdomain); with `rules`,
    /// only someone whose claims hold every `claim=value` (a list claim must contain the value).
    static func admission(domains: [String], rules: [String]) -> @Sendable (Identity, [String: JSONValue]) -> String? {
        let rules = rules.compactMap { rule -> (String, String)? in
            guard let equals = rule.firstIndex(of: "=") else { return nil }
            return (String(rule[..<equals]), String(rule[rule.index(after: equals)...]))
        }
        return { identity, claims in
            if !domains.isEmpty {
                guard let email = identity.email, identity.emailVerified,
                    let at = email.lastIndex(of: "@")
                else {
                    return
                        "this provider's sign-ins are limited to verified addresses in \(domains.joined(separator: ", "))"
                }
                let domain = email[email.index(after: at)...].lowercased()
                guard domains.contains(where: { domain == $0 || domain.hasSuffix("." + $0) }) else {
                    return
                        "the address \(email) is not in a domain this broker admits (\(domains.joined(separator: ", ")))"
                }
            }
            for (claim, value) in rules {
                let held: Bool =
                    switch claims[claim] {
                    case .string(let text)?: text == value
                    case .array(let items)?: items.contains { $0.stringValue == value }
                    case .bool(let flag)?: String(flag) == value
                    case .int(let number)?: String(number) == value
                    default: false
                    }
                guard held else { return "the sign-in lacks \(claim)=\(value), which this broker requires" }
            }
            return nil
        }
    }
}
