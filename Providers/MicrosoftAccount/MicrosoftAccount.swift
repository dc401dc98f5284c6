package import BrokerCore
import MicrosoftAccountSchema
package import OpenIDConnect
package import ProviderSupport

/// Microsoft account / Microsoft identity platform v2 (OpenID Connect).
///
/// The tenant is `consumers` by default (personal Microsoft accounts); `common`, `organizations` or a
/// tenant id are allowed. Microsoft's issuer is templated by tenant: an ID token's `iss` must be
/// `https://login.microsoftonline.com/{tid}/v2.0` for the token's own `tid`, and the `tid` must fit the
/// configured tenant — with `consumers`, exactly the Microsoft-account tenant
/// `9188040d-6c67-4c5b-b112-36a304b66dad`; with a tenant id, that id; with `organizations`, anything but the
/// consumer tenant. An explicit `issuer` in the configuration overrides this: one containing `{tenantid}` is
/// a template on another host (an emulator; endpoints follow Microsoft's paths there), any other is the one
/// exact issuer, whose discovery gives the endpoints. Users are keyed on `tid` + `oid` (falling back to `sub`), never on `email` or
/// `preferred_username`, which tenants control.
package enum MicrosoftAccount {
    package static let id = MicrosoftAccountSchema.id
    package static let consumersTenantID = "9188040d-6c67-4c5b-b112-36a304b66dad"
    static let host = MicrosoftAccountSchema.host

    package static let descriptor = ProviderDescriptor(
        schema: MicrosoftAccountSchema.schema,
        make: { section, context throws(ProviderError) in
            OpenIDConnectProvider(
                configuration: try configuration(section), directory: context.directory, http: context.http,
                clock: context.clock)
        }
    )

    static func isTenant(_ text: String) -> Bool { MicrosoftAccountSchema.isTenant(text) }

    package static func configuration(_ section: ProviderSection) throws(ProviderError) -> OpenIDConnectConfiguration {
        let (clientID, secret) = try section.credentials("client_id", "client_secret")
        let tenant = section.text("tenant") ?? "consumers"
        guard isTenant(tenant) else {
            throw .invalidResponse(
                "providers.microsoftaccount.tenant must be consumers, common, organizations or a tenant id")
        }
        // The issuer: Microsoft's template by default; a configured one is a template too when it contains
        // {tenantid} (an emulator), else one exact issuer whose discovery gives the endpoints.
        let issuer = section.text("issuer") ?? "\(host)/{tenantid}/v2.0"
        let templateSuffix = "/{tenantid}/v2.0"
        let templated = issuer.hasSuffix(templateSuffix)
        let base = templated ? String(issuer.dropLast(templateSuffix.count)) : nil
        var configuration = OpenIDConnectConfiguration(
            id: id, clientID: clientID, clientSecret: secret,
            issuer: base.map { "\($0)/\(tenant)/v2.0" } ?? issuer)
        func endpoint(_ key: String, path: String) throws(ProviderError) -> EndpointURL? {
            if let configured = try section.endpointIfSet(key) { return configured }
            guard let base else { return nil }
            return try EndpointURL("\(base)/\(tenant)/\(path)", name: "providers.microsoftaccount.\(key)")
        }
        configuration.authorizationEndpoint = try endpoint("authorization_endpoint", path: "oauth2/v2.0/authorize")
        configuration.tokenEndpoint = try endpoint("token_endpoint", path: "oauth2/v2.0/token")
        configuration.jwksURI = try endpoint("jwks_uri", path: "discovery/v2.0/keys")
        configuration.tokenAuthentication = .post
        configuration.issuerCheck = { iss, claims in
            guard let tid = claims["tid"]?.stringValue, tenantAllows(tenant, tid: tid) else { return false }
            return iss == (templated ? issuer.replacingTenantID(with: tid) : issuer)
        }
        configuration.subject = { claims in
            if let tid = claims["tid"]?.stringValue, let oid = claims["oid"]?.stringValue, !tid.isEmpty, !oid.isEmpty {
                return "\(tid).\(oid)"
            }
            return claims["sub"]?.stringValue
        }
        // Microsoft sends no email_verified; a personal Microsoft account's email is verified by Microsoft,
        // and a work tenant's only when it says so (xms_edov, the "email domain owner verified" claim).
        configuration.emailVerified = { claims in
            claims["tid"]?.stringValue == consumersTenantID || claims["xms_edov"]?.boolValue == true
        }
        return configuration
    }

    static func tenantAllows(_ tenant: String, tid: String) -> Bool {
        switch tenant {
        case "consumers": tid == consumersTenantID
        case "organizations": tid != consumersTenantID && isTenantID(tid)
        case "common": isTenantID(tid)
        default: tid.lowercased() == tenant.lowercased()
        }
    }

    static func isTenantID(_ text: String) -> Bool { MicrosoftAccountSchema.isTenantID(text) }
}

extension String {
    fileprivate func replacingTenantID(with tid: String) -> String {
        replacing("{tenantid}", with: tid)
    }
}
