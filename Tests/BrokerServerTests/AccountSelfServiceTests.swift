import BrokerCore
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// `POST /auth/account/delete` and `GET /auth/account/export`, and `broker account delete|export`.
@Suite("deleting and exporting one's own account")
struct AccountSelfServiceTests {
    static let password = "correct horse battery staple"

    func delete(_ client: InProcessBroker.Client, bearer: String?, password: String?) async throws
        -> InProcessBroker.Client.Reply
    {
        var headers: HTTPFields = [.contentType: "application/json"]
        if let bearer { headers[.authorization] = "Bearer \(bearer)" }
        var body: [String: JSONValue] = [:]
        if let password { body["password"] = .string(password) }
        return try await client.send(
            .post, "/auth/account/delete", headers: headers, body: Array(JSONValue.object(body).serialized().utf8))
    }

    @Test func aCustomAccountDeletesItselfWithItsPasswordAndEverythingEnds() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let registered = try await client.register("leaving@example.com", Self.password)
            let access = try #require(registered["access_token"]?.stringValue)
            let refresh = try #require(registered["refresh_token"]?.stringValue)
            let other = try await client.register("staying@example.com", Self.password)
            let otherAccess = try #require(other["access_token"]?.stringValue)

            // RT2-1: an API access token alone neither exports nor deletes the account.
            let byAccessToken = try await client.get("/auth/account/export", bearer: access)
            #expect(byAccessToken.status == 401 && byAccessToken.error == "invalid_token")
            #expect(byAccessToken.header("WWW-Authenticate")?.contains("scope=\"account\"") == true)
            #expect(try await delete(client, bearer: access, password: Self.password).status == 401)
            #expect(try await client.get("/auth/me", bearer: access).status == 200, "nothing deleted")
            let account = try await client.accountToken(registered)
            #expect(try await client.get("/auth/me", bearer: account).status == 401, "an account token is no API token")

            let export = try await client.get("/auth/account/export", bearer: account)
            #expect(export.status == 200)
            #expect(export["user"]?["email"]?.stringValue == "leaving@example.com")
            #expect(export["password_account"]?["email_verified_at"] == .null)
            #expect(export["sessions"]?.arrayValue?.count == 1)
            let text = String(decoding: export.body, as: UTF8.self)
            #expect(
                !text.contains("scrypt") && !text.contains(refresh) && !text.contains(access)
                    && !text.contains(account), "no secret exported")
            #expect(try await client.get("/auth/account/export", bearer: nil).status == 401)

            #expect(try await delete(client, bearer: nil, password: Self.password).status == 401)
            #expect(try await delete(client, bearer: account, password: "not the password").status == 401)
            #expect(try await delete(client, bearer: account, password: nil).status == 400)
            #expect(try await client.get("/auth/me", bearer: access).status == 200, "nothing deleted yet")

            let deleted = try await delete(client, bearer: account, password: Self.password)
            #expect(deleted.status == 200)
            #expect(deleted["status"]?.stringValue == "deleted")
            #expect(try await client.get("/auth/me", bearer: access).status == 401, "its tokens stop at once")
            #expect(try await client.refresh(refresh).status == 400)
            #expect(try await client.login("leaving@example.com", Self.password).status == 401)
            #expect(try await broker.store.passwordAccount(email: "leaving@example.com") == nil)
            #expect(try await client.get("/auth/me", bearer: otherAccess).status == 200, "nobody else is touched")
            #expect(
                try await client.register("leaving@example.com", Self.password).status == 201, "the address is free")
        }
    }

    @Test func aProviderAccountNeedsASignInOfTheLastTenMinutes() async throws {
        let broker = try await InProcessBroker()
        guard
            case .user(let user) = try await broker.store.signIn(
                IdentityRecord(provider: "google", subject: "1045", email: "g@example.com", name: "G"),
                now: broker.clock.seconds())
        else { throw StoreError.conflict("unlinked") }
        let first = try await broker.service.tokens.startSession(
            user: user, clientID: "broker-cli", scope: nil, signedInWith: "google")
        let staleAccess = try #require(first["access_token"]?.stringValue)
        try await broker.test { client in
            broker.clock.advance(by: 601)
            let stale = try await client.accountToken(refreshToken: try #require(first["refresh_token"]?.stringValue))
            let refused = try await delete(client, bearer: stale, password: nil)
            // RFC 9470: a sign-in within the last ten minutes, asked as max_age (no acr: one factor is all it has).
            #expect(refused.status == 401)
            #expect(refused.error == "insufficient_user_authentication")
            #expect(
                refused.header("WWW-Authenticate")
                    == "Bearer error=\"insufficient_user_authentication\", error_description=\"this change needs a "
                    + "sign-in within the last 10 minutes: sign in again (broker login --provider google) and retry\", "
                    + "max_age=600")
            let export = try await client.get("/auth/account/export", bearer: stale)
            #expect(export["user"]?["provider"]?.stringValue == "google")
            #expect(export["password_account"] == nil)
            let again = try await broker.service.tokens.startSession(
                user: user, clientID: "broker-cli", scope: nil, signedInWith: "google")
            let fresh = try await client.accountToken(refreshToken: try #require(again["refresh_token"]?.stringValue))
            #expect(try await delete(client, bearer: fresh, password: nil).status == 200)
            #expect(try await client.get("/auth/me", bearer: staleAccess).status == 401)
            #expect(try await broker.store.user(id: user.id) == nil)
        }
    }

}
