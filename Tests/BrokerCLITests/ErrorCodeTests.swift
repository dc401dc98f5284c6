import BrokerClient
import BrokerCore
import Testing

/// One vocabulary of error codes (issue "Rooms for the next floor", item 3): the sets that decide what a
/// refusal means, and the exit codes the CLI derives from them.
@Suite("error codes")
struct ErrorCodeTests {
    static func rejected(_ code: OAuthErrorCode, status: Int = 400) -> BrokerAPIError {
        .rejected(status: status, code: code, description: "")
    }

    @Test func theSetsSayWhatARefusalMeans() {
        #expect(OAuthErrorCode.sessionRefusals.isSubset(of: OAuthErrorCode.credentialRefusals))
        // A session refusal drops the session; a refused scope or password does not.
        #expect(Self.rejected(.invalidGrant).isAuthenticationRefusal)
        #expect(Self.rejected(.invalidToken).isAuthenticationRefusal)
        #expect(!Self.rejected(.invalidScope).isAuthenticationRefusal)
        #expect(!Self.rejected(.invalidCredentials).isAuthenticationRefusal)
        #expect(Self.rejected(.tooManyRequests, status: 401).isAuthenticationRefusal, "any 401")
    }

    @Test(arguments: [
        (OAuthErrorCode.invalidGrant, BrokerClient.ExitStatus.authenticationRequired),
        (.invalidScope, .authenticationRequired), (.invalidClient, .authenticationRequired),
        (.invalidCredentials, .authenticationRequired), (.tooManyRequests, .failure), (.serverError, .failure),
        (OAuthErrorCode("a_code_from_a_newer_broker"), .failure),
    ])
    func exitCodesFollowTheSet(code: OAuthErrorCode, status: BrokerClient.ExitStatus) {
        #expect(BrokerClient.ExitStatus.of(Self.rejected(code)) == status)
        #expect(BrokerClient.ExitStatus.of(Self.rejected(code), signingIn: true) == .failure, "a failed sign-in is 1")
    }

    @Test func aCodeReadsAsItsWireName() {
        #expect(OAuthErrorCode.useDPoPNonce.rawValue == "use_dpop_nonce")
        #expect(OAuthErrorCode(rawValue: "invalid_grant") == .invalidGrant)
        #expect("\(OAuthErrorCode.lastIdentity)" == "last_identity")
    }
}
