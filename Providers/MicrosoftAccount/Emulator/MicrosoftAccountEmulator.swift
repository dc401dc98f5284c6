import BrokerCore
import BrokerCrypto
import HTTPTypes
import Hummingbird
import MicrosoftAccount
package import ProviderEmulators

/// The Microsoft identity platform v2 under `/microsoft/{tenant}/…`, for `broker emulate`: the
/// tenant-templated issuer, `tid` and `oid` claims, and the tenant segments' rules (`consumers` signs in
/// personal accounts only, `organizations` work accounts only, a tenant id its own).
package enum MicrosoftAccountEmulator {
    /// The tenant of personal Microsoft accounts (the module's constant).
    static let consumersTenantID = MicrosoftAccount.consumersTenantID
    static let workTenantID = "72f988bf-86f1-41af-91ab-2d7cd011db47"

    package static let flavor = OpenIDEmulator.Flavor(
        name: "Microsoft",
        clientID: "6731de76-14a6-49ae-97bc-6eba6914391e",
        clientSecret: "emulated-microsoft-secret",
        accounts: [
            .init(
                id: "carol", subject: "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ", email: "carol@outlook.com",
                emailVerified: true, name: "Carol Personal", tenantID: consumersTenantID,
                objectID: "00000000-0000-0000-6d1e-5e3f2a1b0c9d"),
            .init(
                id: "dave", subject: "Zf2Jq6lXoWmQ2nGm0zQ1hQ4w5y7uR9tPqLkJhGfDsAa", email: "dave@contoso.example",
                emailVerified: false, name: "Dave Work", tenantID: workTenantID,
                objectID: "4f5e6d7c-8b9a-4c3d-9e2f-1a0b9c8d7e6f"),
        ],
        paths: .init(
            authorize: "/oauth2/v2.0/authorize", token: "/oauth2/v2.0/token", keys: "/discovery/v2.0/keys"),
        inTenant: { account, tenant in
            switch tenant {
            case "common": true
            case "consumers": account.tenantID == consumersTenantID
            case "organizations": account.tenantID != consumersTenantID
            default: account.tenantID == tenant
            }
        },
        madeUp: { name, tenant in
            let digest = Digest.sha256(name)
            let hex = digest.hexString
            let oid = [
                hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4), hex.dropFirst(16).prefix(4),
                hex.dropFirst(20).prefix(12),
            ]
            .joined(separator: "-")
            let tid: String
            switch tenant {
            case nil, "consumers", "common": tid = consumersTenantID
            case "organizations": tid = workTenantID
            case let id?: tid = id
            }
            return .init(
                id: name, subject: Base64URL.encode(Array(digest.prefix(32))), email: "\(name)@outlook.com",
                emailVerified: true, name: name, tenantID: tid, objectID: oid)
        })

    /// Microsoft's issuer for a tenant segment: the consumer tenant's id for `consumers`, the literal
    /// `{tenantid}` template for `common` and `organizations`, the id itself otherwise.
    package static func issuer(base: String, tenant: String) -> String {
        let tid: String
        switch tenant {
        case "consumers": tid = consumersTenantID
        case "common", "organizations": tid = "{tenantid}"
        default: tid = tenant
        }
        return "\(base)/\(tid)/v2.0"
    }

    package static let emulator = ProviderEmulator(
        path: "microsoft", summary: "/microsoft/{tenant} (identity platform v2); test users carol, dave"
    ) { routes in
        let microsoft = try OpenIDEmulator(flavor, approveAs: routes.approveAs, clock: routes.clock)
        let server = routes.base
        let base: @Sendable () -> String = { server.value + "/microsoft" }
        routes.get("/microsoft/:tenant/v2.0/.well-known/openid-configuration") { _, context in
            let tenant = context.parameters.get("tenant") ?? ""
            return .json(
                status: 200,
                microsoft.discovery(base: base() + "/" + tenant, issuer: issuer(base: base(), tenant: tenant)))
        }
        routes.get("/microsoft/:tenant/discovery/v2.0/keys") { _, _ in .json(status: 200, try microsoft.jwks()) }
        routes.get("/microsoft/:tenant/oauth2/v2.0/authorize") { request, context in
            microsoft.authorize(EmulatorRoutes.query(request), tenant: context.parameters.get("tenant"))
        }
        routes.post("/microsoft/:tenant/oauth2/v2.0/authorize") { request, context in
            try microsoft.consent(try await EmulatorRoutes.form(request), tenant: context.parameters.get("tenant"))
        }
        routes.post("/microsoft/:tenant/oauth2/v2.0/token") { request, _ in
            try microsoft.token(
                try await EmulatorRoutes.form(request), authorization: request.headers[.authorization],
                issuer: { account in "\(base())/\(account.tenantID ?? "")/v2.0" })
        }
    }
}
