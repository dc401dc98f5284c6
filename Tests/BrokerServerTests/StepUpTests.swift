import BrokerCore
import BrokerCrypto
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// Issue "A second factor", item 4: broker's own endpoints ask for more with RFC 9470 challenges — an account
/// with two factors changes only from a sign-in with both, an account without a password is deleted only after a
/// recent sign-in, an app that requires two factors gets nothing at userinfo for one — and the CLI's tokens say
/// what an API needs to ask the same (`acr`, `auth_time`).
@Suite("Step-up (RFC 9470) at broker's own endpoints")
struct StepUpTests {
    typealias OP = OpenIDProviderTests
    typealias MFA = SecondFactorTests
    typealias Client = InProcessBroker.Client

    /// The `WWW-Authenticate` of a step-up refusal, after checking the refusal is one.
    static func challenge(_ reply: Client.Reply, _ what: String) throws -> String {
        #expect(reply.status == 401 && reply.error == "insufficient_user_authentication", "\(what): \(reply.status)")
        return try #require(reply.header("WWW-Authenticate"), "\(what)")
    }

    @Test func anAccountWithTwoFactorsChangesOnlyFromASignInWithBoth() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let (key, _, userID) = try await MFA.enrolled(broker, client, "ada@example.com")
            let user = try #require(try await broker.store.user(id: userID))
            // A session from the password alone (as from before the factor was added): one factor.
            let weak = try await broker.service.tokens.startSession(
                user: user, clientID: "broker-cli", scope: nil, signedInWith: "custom")
            let weakToken = try #require(weak["access_token"]?.stringValue)
            let weakAccess = try #require(jwtParts(weakToken).claims)
            #expect(weakAccess["acr"] == "1" && weakAccess["amr"] == ["pwd"])
            #expect(weakAccess["auth_time"]?.intValue == broker.clock.seconds(), "RFC 9068 §2.2.1")
            let account = try await client.accountToken(refreshToken: try #require(weak["refresh_token"]?.stringValue))
            let changes: [(String, JSONValue)] = [
                (
                    "/auth/password/change",
                    ["current_password": .string(OP.password), "new_password": "a new passphrase 2"]
                ),
                ("/auth/link", ["provider": "google", "code_challenge": .string(String(repeating: "a", count: 43))]),
                ("/auth/unlink", ["provider": "custom"]),
                ("/auth/account/delete", ["password": .string(OP.password)]),
            ]
            for (path, body) in changes {
                let header = try Self.challenge(try await MFA.postJSON(client, path, body, bearer: account), path)
                #expect(header.hasPrefix(#"Bearer error="insufficient_user_authentication""#), "\(path): \(header)")
                #expect(header.contains(#"acr_values="2""#) && !header.contains("max_age"), "\(path): \(header)")
                #expect(header.contains("broker login --provider custom"), "\(path): the way to step up")
            }
            // Nothing changed: the password (with its code) still signs in; the user and the password are there.
            broker.clock.advance(by: 30)
            let strong = try await MFA.login(client, "ada@example.com", otp: MFA.pyotp(key, at: broker.clock.seconds()))
            #expect(strong.status == 200)
            #expect(try await broker.store.passwordAccount(email: "ada@example.com") != nil)
            let strongToken = try #require(strong["access_token"]?.stringValue)
            let strongAccess = try #require(jwtParts(strongToken).claims)
            #expect(strongAccess["acr"] == "2" && strongAccess["amr"] == ["pwd", "otp", "mfa"])
            let signedInAt = broker.clock.seconds()
            #expect(strongAccess["auth_time"]?.intValue == signedInAt)

            // The sign-in with both changes the account; a refresh later still says when it signed in.
            broker.clock.advance(by: 900)
            let refreshed = try await client.refresh(try #require(strong["refresh_token"]?.stringValue))
            let laterToken = try #require(refreshed["access_token"]?.stringValue)
            let later = try #require(jwtParts(laterToken).claims)
            #expect(later["auth_time"]?.intValue == signedInAt && later["acr"] == "2")
            let strongAccount = try await client.accountToken(refreshed)
            let changed = try await MFA.postJSON(
                client, "/auth/password/change",
                ["current_password": .string(OP.password), "new_password": "a new passphrase 2"], bearer: strongAccount)
            #expect(changed.status == 200, "\(changed.json?.serialized() ?? "")")
        }
    }

    @Test func anAccountWithOneFactorIsNotAskedForMore() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let registered = try await client.register("bo@example.com", OP.password)
            let account = try await client.accountToken(registered)
            let changed = try await MFA.postJSON(
                client, "/auth/password/change",
                ["current_password": .string(OP.password), "new_password": "a new passphrase 2"], bearer: account)
            #expect(changed.status == 200, "a password is all this account has")
        }
    }

    /// The challenge is in the scheme the token came in (RFC 9449 §7.1 for DPoP), and a description cannot break
    /// out of its quoted string.
    @Test func theChallengeTakesTheTokensSchemeAndQuotesItsDescription() {
        let need = StepUp.Need(acr: "2", maxAge: 600)
        let dpop = StepUp.challenge(need, detail: #"say "hi" \ bye"#, authorization: "DPoP eyJ")
        #expect(
            dpop.headers.first?.1
                == #"DPoP algs="ES256 EdDSA RS256", error="insufficient_user_authentication", "#
                + #"error_description="say 'hi'  bye", acr_values="2", max_age=600"#)
        #expect(dpop.status == 401 && dpop.code == .insufficientUserAuthentication)
        let bearer = StepUp.challenge(StepUp.Need(maxAge: 60), detail: "x", authorization: "Bearer eyJ")
        #expect(
            bearer.headers.first?.1
                == #"Bearer error="insufficient_user_authentication", error_description="x", max_age=60"#)
    }

    /// An app that requires two factors: a token from a one-factor sign-in (issued before the app asked for more)
    /// gets a challenge at userinfo; one from a sign-in with both gets the claims.
    @Test func anAppThatRequiresTwoFactorsAsksForThemAtUserinfo() async throws {
        let broker = try await InProcessBroker()
        try await broker.store.createApp(
            AppRecord(
                clientID: "web", secretHash: broker.service.appTokens.secrets.hash(Secret(OP.secret)),
                redirectURIs: [OP.web], firstParty: true, createdAt: broker.clock.seconds(), requireMFA: true))
        try await broker.test { client in
            let registered = try await client.register("cy@example.com", OP.password)
            let userID = try #require(registered["user_id"]?.stringValue.flatMap(UserID.init))
            let user = try #require(try await broker.store.user(id: userID))
            for (way, refused) in [(ProviderID.custom, true), (.customOTP, false)] {
                let session = try await broker.service.tokens.startSession(
                    user: user, clientID: "web", scope: "openid email", signedInWith: way)
                let access = try #require(session["access_token"]?.stringValue)
                let reply = try await client.get("/auth/userinfo", bearer: access)
                if refused {
                    let header = try Self.challenge(reply, "one factor")
                    #expect(header.contains(#"acr_values="2""#), "\(header)")
                    #expect(reply["sub"] == nil)
                } else {
                    #expect(reply.status == 200 && reply["email"] == "cy@example.com", "\(reply.status)")
                }
            }
        }
    }
}
