import BrokerCore
import BrokerTesting
import Facebook
import Foundation
import Google
import MicrosoftAccount
import OpenIDConnect
import ProviderSchemaSupport
import ProviderSupport
import Testing
import Twitter

/// The modules' production defaults are the endpoints in each provider folder's `production.json`
/// (`Providers/Google/production.json`: what people read to see where broker goes in production).
@Suite("provider defaults match each folder's production.json")
struct ProviderDefaultsTests {
    /// The `production.json` of the provider folder whose name is `id` (any case: `MicrosoftAccount`).
    static func productionFile(_ id: String) throws -> URL {
        let root = TestPaths.repositoryRoot.appendingPathComponent("Providers")
        let folder = try #require(
            try FileManager.default.contentsOfDirectory(atPath: root.path).first { $0.lowercased() == id },
            "a folder Providers/<Name> for \(id)")
        return root.appendingPathComponent(folder).appendingPathComponent("production.json")
    }

    static func json(_ name: String) throws -> JSONValue {
        try #require(JSONValue.parse(Array(try Data(contentsOf: try productionFile(name)))))
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

        // The module's defaults are the production endpoints in Providers/Google/production.json.
        let json = try Self.json("google")
        for (key, value) in Google.defaults { #expect(json[key]?.stringValue == value, "\(key)") }
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
