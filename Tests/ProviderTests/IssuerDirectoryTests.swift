import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerTesting
import Foundation
import Logging
import ProviderSupport
import Testing

/// The discovery + JWKS cache on a manual clock and a scripted transport: the refetch rules hold to the
/// exact counts they imply, without sleeping.
@Suite("issuer directory: discovery and key caching")
struct IssuerDirectoryTests {
    static let issuer = "https://ci.example"
    static let discovery = "https://ci.example/.well-known/openid-configuration"
    static let jwksURI = "https://ci.example/jwks"

    let clock = ManualClock()
    let transport = ScriptedTransport()
    let directory: IssuerDirectory

    init() {
        let transport = transport
        directory = IssuerDirectory(
            http: { transport }, clock: clock, logger: Logger.test(), freshFor: 600, refetchInterval: 5)
        transport.onJSON(
            "GET", Self.discovery, ["issuer": .string(Self.issuer), "jwks_uri": .string(Self.jwksURI)])
    }

    static func jwks(_ keys: [(AsymmetricKey, String)]) throws -> JSONValue {
        var list: [JSONValue] = []
        for (key, kid) in keys {
            var jwk = try key.jwk()
            jwk.kid = kid
            let data = try JSONEncoder().encode(jwk)
            list.append(try #require(JSONValue.parse(Array(data))))
        }
        return ["keys": .array(list)]
    }

    var fetches: Int { transport.count("GET", Self.jwksURI) }

    @Test func keysAreCachedAndRefetchedOnceForANewKid() async throws {
        let first = try AsymmetricKey.generate(.ecP256)
        let second = try AsymmetricKey.generate(.ecP256)
        transport.onJSON("GET", Self.jwksURI, try Self.jwks([(first, "k1")]))

        for _ in 0..<3 { _ = try await directory.keys(issuer: Self.issuer, kid: "k1") }
        #expect(fetches == 1, "cached after the first fetch")

        // The platform rotates its key. The first token under the new kid makes one refetch at once, however soon
        // after the last fetch: a fetch for the keys themselves does not use up the next rotation's refetch.
        transport.onJSON("GET", Self.jwksURI, try Self.jwks([(second, "k2")]))
        clock.advance(by: 1)
        #expect(try await directory.keys(issuer: Self.issuer, kid: "k2").keys["k2"] != nil)
        #expect(fetches == 2)
        #expect(try await directory.keys(issuer: Self.issuer, kid: "k2").keys["k2"] != nil)
        #expect(fetches == 2, "cached from then on")

        // Made-up kids do not turn the broker into a request amplifier: at most one refetch per interval.
        for round in 0..<5 {
            #expect(
                try await directory.keys(issuer: Self.issuer, kid: "forged-\(round)").keys["forged-\(round)"] == nil)
        }
        #expect(fetches == 2, "no refetch within 5 s of the last one")
        clock.advance(by: 5)
        for round in 0..<5 { _ = try await directory.keys(issuer: Self.issuer, kid: "forged-again-\(round)") }
        #expect(fetches == 3, "one refetch for the next interval, not five")
    }

    @Test func keysExpireAfterTheirFreshnessAndSurviveAnOutage() async throws {
        let key = try AsymmetricKey.generate(.ecP256)
        transport.on(
            "GET", Self.jwksURI, { _ in ScriptedTransport.json(try Self.jwks([(key, "k1")])) },
            ScriptedTransport.failure(.connectionFailed, "connection refused"))
        _ = try await directory.keys(issuer: Self.issuer, kid: "k1")
        clock.advance(by: 599)
        _ = try await directory.keys(issuer: Self.issuer, kid: "k1")
        #expect(fetches == 1, "fresh for 600 s")
        clock.advance(by: 2)
        // Stale: one refetch, which fails; the cached keys are still used during the outage.
        #expect(try await directory.keys(issuer: Self.issuer, kid: "k1").keys["k1"] != nil)
        #expect(fetches == 2)
        // A day later the outage is still on: nothing is trusted any more.
        clock.advance(by: 24 * 3600)
        await #expect(throws: IssuerDirectory.Failure.self) {
            try await directory.keys(issuer: Self.issuer, kid: "k1")
        }
    }

    @Test func discoveryMustNameTheIssuerAndAnAcceptableJWKSURI() async throws {
        let transport = ScriptedTransport()
        let directory = IssuerDirectory(http: { transport }, clock: clock, logger: Logger.test())
        transport.onJSON(
            "GET", "https://a.example/.well-known/openid-configuration",
            ["issuer": "https://evil.example", "jwks_uri": "https://a.example/jwks"])
        await #expect {
            try await directory.keys(issuer: "https://a.example", kid: nil)
        } throws: { error in
            "\(error)".contains("names another issuer")
        }
        transport.onJSON(
            "GET", "https://b.example/.well-known/openid-configuration",
            ["issuer": "https://b.example", "jwks_uri": "http://b.example/jwks"])
        await #expect {
            try await directory.keys(issuer: "https://b.example", kid: nil)
        } throws: { error in
            "\(error)".contains("must be https")
        }
        #expect(transport.count("GET", "http://b.example/jwks") == 0, "a plain-http key URL is never fetched")
    }
}
