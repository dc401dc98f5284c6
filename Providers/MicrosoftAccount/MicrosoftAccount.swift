public import BrokerCore
public import OpenIDConnect

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
public enum MicrosoftAccount {
    public static let consumersTenantID = "9188040d-6c67-4c5b-b112-36a304b66dad"
    static let host = "https://login.microsoftonline.com"

    public static func configuration(_ section: [String: JSONValue]) throws(ProviderError) -> OpenIDConnectConfiguration
    {
        guard let clientID = section["client_id"]?.stringValue, !clientID.isEmpty,
            let secret = section["client_secret"]?.stringValue, !secret.isEmpty
        else { throw .invalidResponse("providers.microsoftaccount needs client_id and client_secret") }
        let tenant = section["tenant"]?.stringValue ?? "consumers"
        guard ["consumers", "common", "organizations"].contains(tenant) || isTenantID(tenant) else {
            throw .invalidResponse(
                "providers.microsoftaccount.tenant must be consumers, common, organizations or a tenant id")
        }
        // The issuer: Microsoft's template by default; a configured one is a template too when it contains
        // {tenantid} (an emulator), else one exact issuer whose discovery gives the endpoints.
        let issuer = section["issuer"]?.stringValue ?? "\(host)/{tenantid}/v2.0"
        let templateSuffix = "/{tenantid}/v2.0"
        let templated = issuer.hasSuffix(templateSuffix)
        let base = templated ? String(issuer.dropLast(templateSuffix.count)) : nil
        var configuration = OpenIDConnectConfiguration(
            id: .microsoftaccount, clientID: clientID, clientSecret: Secret(secret),
            issuer: base.map { "\($0)/\(tenant)/v2.0" } ?? issuer)
        if let base {
            configuration.authorizationEndpoint = "\(base)/\(tenant)/oauth2/v2.0/authorize"
            configuration.tokenEndpoint = "\(base)/\(tenant)/oauth2/v2.0/token"
            configuration.jwksURI = "\(base)/\(tenant)/discovery/v2.0/keys"
        }
        for key in ["authorization_endpoint", "token_endpoint", "jwks_uri"] {
            guard let value = section[key]?.stringValue else { continue }
            switch key {
            case "authorization_endpoint": configuration.authorizationEndpoint = value
            case "token_endpoint": configuration.tokenEndpoint = value
            default: configuration.jwksURI = value
            }
        }
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

    /// A GUID in its 8-4-4-4-12 hex form.
    static func isTenantID(_ text: String) -> Bool {
        let groups = text.split(separator: "-", omittingEmptySubsequences: false)
        return groups.map(\.count) == [8, 4, 4, 4, 12] && groups.allSatisfy { $0.allSatisfy(\.isHexDigit) }
    }
}

extension String {
    fileprivate func replacingTenantID(with tid: String) -> String {
        replacing("{tenantid}", with: tid)
    }
}
