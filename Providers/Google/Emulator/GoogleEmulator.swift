import BrokerCrypto
import HTTPTypes
import Hummingbird
package import ProviderEmulators

/// Google's OpenID Connect endpoints under `/google`, for `broker emulate` (Config/emulated.json points the
/// `google` provider here): discovery, keys, authorize, token, userinfo.
package enum GoogleEmulator {
    package static let flavor = OpenIDEmulator.Flavor(
        name: "Google",
        clientID: "emulated-google-client.apps.googleusercontent.com",
        clientSecret: "emulated-google-secret",
        accounts: [
            // Google subjects are 21-digit numbers.
            .init(
                id: "alice", subject: "104512345678901234567", email: "alice@example.com", emailVerified: true,
                name: "Alice Example"),
            .init(
                id: "bob", subject: "109876543210987654321", email: "bob@example.net", emailVerified: false,
                name: "Bob Unverified"),
        ],
        paths: .init(authorize: "/authorize", token: "/token", keys: "/jwks"),
        madeUp: { name, _ in
            let digits = Digest.sha256(name).map { String($0 % 10) }.joined()
            return .init(
                id: name, subject: "1" + digits.prefix(20), email: "\(name)@example.com", emailVerified: true,
                name: name)
        })

    package static let emulator = ProviderEmulator(
        path: "google", summary: "/google (OIDC); test users alice, bob"
    ) { routes in
        let google = try OpenIDEmulator(flavor, approveAs: routes.approveAs, clock: routes.clock)
        let server = routes.base
        let base: @Sendable () -> String = { server.value + "/google" }
        routes.get("/google/.well-known/openid-configuration") { _, _ in
            .json(status: 200, google.discovery(base: base(), issuer: base()))
        }
        routes.get("/google/jwks") { _, _ in .json(status: 200, try google.jwks()) }
        routes.get("/google/authorize") { request, _ in google.authorize(EmulatorRoutes.query(request)) }
        routes.post("/google/authorize") { request, _ in try google.consent(try await EmulatorRoutes.form(request)) }
        routes.post("/google/token") { request, _ in
            try google.token(
                try await EmulatorRoutes.form(request), authorization: request.headers[.authorization],
                issuer: { _ in base() })
        }
        routes.get("/google/userinfo") { request, _ in google.userinfo(authorization: request.headers[.authorization]) }
    }
}
