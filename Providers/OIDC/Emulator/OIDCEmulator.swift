import BrokerCore
import BrokerCrypto
import HTTPTypes
import Hummingbird
package import ProviderEmulators

/// A generic OpenID Connect issuer under `/oidc`, for `broker emulate` (Config/emulated.json points a provider
/// of `"type": "oidc"` here): discovery, keys that rotate (`POST /oidc/rotate` publishes a new key beside the
/// current one and signs with it from then on), authorize, token, userinfo. Its ID tokens carry only the
/// subject — the address, name and `groups` come from userinfo, as many providers answer.
package enum OIDCEmulator {
    package static let flavor = OpenIDEmulator.Flavor(
        name: "Example Corp",
        clientID: "emulated-oidc-client",
        clientSecret: "emulated-oidc-secret",
        accounts: [
            .init(
                id: "alice", subject: "u-7f3a9c21", email: "alice@corp.example", emailVerified: true,
                name: "Alice Corp", extra: ["groups": ["staff", "broker-users"]]),
            .init(
                id: "mallory", subject: "u-0bad0bad", email: "mallory@elsewhere.example", emailVerified: false,
                name: "Mallory Unverified", extra: ["groups": ["contractors"]]),
        ],
        paths: .init(authorize: "/authorize", token: "/token", keys: "/keys"),
        profileInIDToken: false,
        madeUp: { name, _ in
            .init(
                id: name, subject: "u-" + Base64URL.encode(Array(Digest.sha256(name).prefix(6))),
                email: "\(name)@corp.example", emailVerified: true, name: name, extra: ["groups": ["staff"]])
        })

    package static let emulator = ProviderEmulator(
        path: "oidc",
        summary: "/oidc (any OpenID Connect issuer; POST /oidc/rotate rolls its key); test users alice, mallory"
    ) { routes in
        let issuer = try OpenIDEmulator(flavor, approveAs: routes.approveAs, clock: routes.clock)
        let server = routes.base
        let base: @Sendable () -> String = { server.value + "/oidc" }
        routes.get("/oidc/.well-known/openid-configuration") { _, _ in
            .json(status: 200, issuer.discovery(base: base(), issuer: base()))
        }
        routes.get("/oidc/keys") { _, _ in .json(status: 200, try issuer.jwks()) }
        routes.post("/oidc/rotate") { _, _ in .json(status: 200, .object(["kid": .string(try issuer.rotate())])) }
        routes.get("/oidc/authorize") { request, _ in issuer.authorize(EmulatorRoutes.query(request)) }
        routes.post("/oidc/authorize") { request, _ in try issuer.consent(try await EmulatorRoutes.form(request)) }
        routes.post("/oidc/token") { request, _ in
            try issuer.token(
                try await EmulatorRoutes.form(request), authorization: request.headers[.authorization],
                issuer: { _ in base() })
        }
        routes.get("/oidc/userinfo") { request, _ in issuer.userinfo(authorization: request.headers[.authorization]) }
    }
}
