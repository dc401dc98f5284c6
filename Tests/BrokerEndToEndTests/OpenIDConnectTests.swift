import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerTestSupport
import BrokerTesting
import Facebook
import Foundation
import Google
import Logging
import MicrosoftAccount
import OpenIDConnect
import ProviderSupport
import Testing
import Twitter

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

    @Test func googleAcceptsBothOfItsIssuerSpellingsOnlyForTheRealIssuer() throws {
        let real = try Google.configuration(
            ProviderSection(id: Google.id, values: ["client_id": "c", "client_secret": "s"]))
        #expect(real.acceptedIssuers == ["https://accounts.google.com", "accounts.google.com"])
        #expect(real.tokenEndpoint?.url == "https://oauth2.googleapis.com/token")
        let emulated = try Google.configuration(
            ProviderSection(
                id: Google.id,
                values: [
                    "client_id": "c", "client_secret": "s", "issuer": "http://127.0.0.1:1/google",
                ]))
        #expect(emulated.acceptedIssuers == ["http://127.0.0.1:1/google"])
        #expect(emulated.tokenEndpoint == nil, "from the emulator's discovery")
        #expect(throws: ProviderError.self) {
            try Google.configuration(ProviderSection(id: Google.id, values: ["client_id": "c"]))
        }

        // The module's defaults are the production endpoints in Config/providers/google.json.
        let file = BrokerProcess.repositoryRoot.appendingPathComponent("Config/providers/google.json")
        let json = try #require(JSONValue.parse(Array(try Data(contentsOf: file))))
        for (key, value) in Google.defaults { #expect(json[key]?.stringValue == value, "\(key)") }
    }
}

/// The modules' production defaults are the endpoints in Config/providers/<id>.json.
@Suite("provider defaults match Config/providers")
struct ProviderDefaultsTests {
    static func json(_ name: String) throws -> JSONValue {
        let file = BrokerProcess.repositoryRoot.appendingPathComponent("Config/providers/\(name).json")
        return try #require(JSONValue.parse(Array(try Data(contentsOf: file))))
    }

    @Test func facebookTwitterMicrosoft() throws {
        let facebook = try Self.json("facebook")
        for (key, value) in Facebook.descriptor.schema.defaults {
            #expect(facebook[key]?.stringValue == value, "facebook \(key)")
        }
        let twitter = try Self.json("twitter")
        for (key, value) in TwitterProvider.defaults {
            #expect(twitter["oauth2"]?[key]?.stringValue == value, "x \(key)")
        }
        for (key, value) in TwitterOAuth1Provider.defaults {
            #expect(twitter["oauth1"]?[key]?.stringValue == value, "x oauth1 \(key)")
        }
        let microsoft = try Self.json("microsoftaccount")
        let configuration = try MicrosoftAccount.configuration(
            ProviderSection(id: MicrosoftAccount.id, values: ["client_id": "c", "client_secret": "s"]))
        func templated(_ key: String) -> String? {
            microsoft[key]?.stringValue?.replacingOccurrences(of: "{tenant}", with: "consumers")
        }
        #expect(configuration.authorizationEndpoint?.url == templated("authorization_endpoint"))
        #expect(configuration.tokenEndpoint?.url == templated("token_endpoint"))
        #expect(configuration.jwksURI?.url == templated("jwks_uri"))
        #expect(microsoft["consumers_tenant_id"]?.stringValue == MicrosoftAccount.consumersTenantID)
    }
}
