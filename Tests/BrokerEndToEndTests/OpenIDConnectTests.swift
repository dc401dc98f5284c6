import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerTestSupport
import BrokerTesting
import Foundation
import Google
import Logging
import OpenIDConnect
import ProviderSupport
import Testing

/// ID token verification of the shared OIDC module, against tokens signed by joserfc (Tests/Interop/ci_issuer.py
/// acting as the provider: discovery, JWKS, and ID tokens with the claims each case needs).
@Suite("OpenID Connect: ID token verification")
struct OpenIDConnectTests {
    static func provider(
        _ issuer: CIIssuer, tenant: String = "oidc", configure: (inout OpenIDConnectConfiguration) -> Void = { _ in }
    )
        -> OpenIDConnectProvider
    {
        var configuration = OpenIDConnectConfiguration(
            id: Google.id, clientID: "our-client", clientSecret: Secret("s"), issuer: issuer.issuer(tenant))
        configure(&configuration)
        return OpenIDConnectProvider(
            configuration: configuration,
            directory: IssuerDirectory(
                http: { HTTPClient.shared }, clock: SystemClock(), logger: Logger.test()),
            http: { HTTPClient.shared }, clock: SystemClock())
    }

    static func claims(_ values: [String: JSONValue]) -> String {
        JSONValue.object(values).serialized()
    }

    @Test func acceptsTheRightTokenAndRefusesEachBrokenRule() async throws {
        let issuer = try await CIIssuer.start()
        let provider = Self.provider(issuer)
        let good: [String: JSONValue] = ["aud": "our-client", "nonce": "n-123", "sub": "1001"]
        let token = try await issuer.token("oidc", [("claims", Self.claims(good))])
        let verified = try await provider.verify(idToken: token, nonce: "n-123")
        #expect(verified["sub"]?.stringValue == "1001")

        let cases: [(String, [(String, String)], String)] = [
            ("another nonce", [("claims", Self.claims(good))], "nonce"),
            ("no nonce", [("claims", Self.claims(good.merging(["nonce": .null]) { $1 }))], "nonce"),
            ("another audience", [("claims", Self.claims(good.merging(["aud": "their-client"]) { $1 }))], "audience"),
            (
                "azp of another client",
                [("claims", Self.claims(good.merging(["azp": "their-client"]) { $1 }))], "azp"
            ),
            (
                "several audiences, no azp",
                [("claims", Self.claims(good.merging(["aud": ["our-client", "x"]]) { $1 }))], "azp"
            ),
            ("another issuer", [("claims", Self.claims(good)), ("iss", "https://evil.example")], "issuer"),
            ("expired", [("claims", Self.claims(good)), ("iat", "-1000"), ("exp", "-500")], "expired"),
            ("alg none", [("claims", Self.claims(good)), ("variant", "none")], "alg none"),
            ("HS256 with the public key", [("claims", Self.claims(good)), ("variant", "hs256")], "HS256"),
            ("unknown kid", [("claims", Self.claims(good)), ("variant", "unknown-kid")], "unknown kid"),
        ]
        for (name, query, reason) in cases {
            let bad = try await issuer.token("oidc", query)
            do {
                _ = try await provider.verify(idToken: bad, nonce: name == "another nonce" ? "n-999" : "n-123")
                Issue.record("\(name): accepted")
            } catch {
                #expect(error.description.contains(reason), "\(name): \(error)")
            }
        }
    }
}
