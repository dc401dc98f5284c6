import BrokerTestSupport
import Testing

/// The endpoint checks written once for both layers (``EndpointContract``), in process: the same assertions
/// BrokerEndToEndTests' `EndpointTests` make against `broker serve`.
@Suite("endpoint contract, in process")
struct EndpointContractTests {
    @Test(arguments: EndpointContract.badRegistrations.indices)
    func registrationRefusesBadInput(case index: Int) async throws {
        try await InProcessBroker().test {
            try await EndpointContract.registrationRefusesBadInput(.inProcess($0), case: index)
        }
    }

    @Test func passwordLengthBounds() async throws {
        try await InProcessBroker().test { try await EndpointContract.passwordLengthBounds(.inProcess($0)) }
    }

    @Test func malformedRequestsGetClearErrorsAndChangeNothing() async throws {
        try await InProcessBroker().test {
            try await EndpointContract.malformedRequestsGetClearErrorsAndChangeNothing(.inProcess($0))
        }
    }

    @Test func tokenGrantErrors() async throws {
        try await InProcessBroker().test { try await EndpointContract.tokenGrantErrors(.inProcess($0)) }
    }

    @Test func discoveryJWKSProvidersAndHealth() async throws {
        let broker = try await InProcessBroker()
        try await broker.test {
            try await EndpointContract.discoveryJWKSProvidersAndHealth(
                .inProcess($0), issuer: "http://broker.test", passkeys: true)
        }
    }

    @Test func registerLoginAndMe() async throws {
        try await InProcessBroker().test {
            _ = try await EndpointContract.registerLoginAndMe(.inProcess($0), issuer: "http://broker.test")
        }
    }

    @Test func refreshRotationAndReuse() async throws {
        try await InProcessBroker().test { try await EndpointContract.refreshRotationAndReuse(.inProcess($0)) }
    }

    @Test func revocationEndsTheSession() async throws {
        try await InProcessBroker().test { try await EndpointContract.revocationEndsTheSession(.inProcess($0)) }
    }
}
