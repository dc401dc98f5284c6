import BrokerConfiguration
import BrokerCore
import BrokerProviderSchemas
import BrokerProviders
import BrokerServer
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// Address verification: the mailed link, the page's button, `email_verified` in tokens and `/auth/me`, and
/// `server.require_verified_email`.
@Suite("email verification")
struct VerificationTests {
    static let password = "correct horse battery staple"

    static func broker(_ sink: SMTPSink, require: Bool = false) async throws -> InProcessBroker {
        try await InProcessBroker(
            config: #"""
                {"server": {"require_verified_email": \#(require)},
                 "mail": {"url": "\#(sink.url)", "from": "Broker <broker@example.com>"}}
                """#)
    }

    static func mailedToken(_ sink: SMTPSink, to email: String) throws -> String? {
        try sink.mailedToken(to: email, subject: "Confirm your email address", path: "/auth/verify")
    }

    func confirm(_ client: InProcessBroker.Client, token: String) async throws -> InProcessBroker.Client.Reply {
        let page = try await client.get("/auth/verify?token=" + token)
        guard page.status == 200, let cookie = PasswordRecoveryTests.cookie(page),
            let csrf = PasswordRecoveryTests.csrf(page)
        else { return page }
        return try await client.send(
            .post, "/auth/verify",
            headers: [.contentType: "application/x-www-form-urlencoded", .cookie: cookie],
            body: Array(FormEncoding.encode([("token", token), ("csrf", csrf)]).utf8))
    }

    @Test func theMailedLinkConfirmsTheAddressOnceAndTokensSaySo() async throws {
        let sink = try await SMTPSink.start()
        let broker = try await Self.broker(sink)
        try await broker.test { client in
            let registered = try await client.register("verify@example.com", Self.password)
            #expect(registered.status == 201)
            #expect(registered["verification"]?.stringValue == "sent")
            let before = try #require(registered["access_token"]?.stringValue)
            #expect(jwtParts(before).claims?["email_verified"] == false)
            #expect(try await client.get("/auth/me", bearer: before)["email_verified"] == false)
            await broker.service.mailer?.flush()
            let token = try #require(try Self.mailedToken(sink, to: "verify@example.com"))
            #expect(try sink.messages().last?["text"]?.stringValue?.contains("within 24 hours") == true)

            // Fetching the link (a mail scanner) spends nothing: the page has a button.
            let page = try await client.get("/auth/verify?token=" + token)
            #expect(page.status == 200)
            #expect(String(decoding: page.body, as: UTF8.self).contains("Confirm my address"))
            #expect(page.header("X-Frame-Options") == "DENY")
            #expect(try await client.get("/auth/verify?token=" + token).status == 200)
            let forged = try await client.send(
                .post, "/auth/verify", headers: [.contentType: "application/x-www-form-urlencoded"],
                body: Array(FormEncoding.encode([("token", token), ("csrf", "x")]).utf8))
            #expect(forged.status == 403, "no CSRF cookie, no confirmation")

            let done = try await confirm(client, token: token)
            #expect(done.status == 200)
            #expect(String(decoding: done.body, as: UTF8.self).contains("Your address is confirmed"))
            #expect(try await client.get("/auth/me", bearer: before)["email_verified"] == true)
            let refreshed = try await client.refresh(try #require(registered["refresh_token"]?.stringValue))
            #expect(jwtParts(try #require(refreshed["access_token"]?.stringValue)).claims?["email_verified"] == true)
            let login = try await client.login("verify@example.com", Self.password)
            #expect(jwtParts(try #require(login["access_token"]?.stringValue)).claims?["email_verified"] == true)
            #expect(try await confirm(client, token: token).status == 400, "once")
        }
    }

    @Test func requiredVerificationKeepsUnconfirmedAccountsOutWithoutTellingGuessers() async throws {
        let sink = try await SMTPSink.start()
        let broker = try await Self.broker(sink, require: true)
        try await broker.test { client in
            let registered = try await client.register("strict@example.com", Self.password)
            #expect(registered.status == 201)
            #expect(registered["access_token"] == nil, "no session before the address is confirmed")
            #expect(registered["verification"]?.stringValue == "sent")
            let refused = try await client.login("strict@example.com", Self.password)
            #expect(refused.status == 403)
            #expect(refused.error == "email_not_verified")
            #expect(
                try await client.login("strict@example.com", "wrong password 99").status == 401,
                "a guesser learns nothing")

            await broker.service.mailer?.flush()
            let first = try #require(try Self.mailedToken(sink, to: "strict@example.com"))
            let known = try await client.post("/auth/verify/resend", json: ["email": "strict@example.com"])
            let unknown = try await client.post("/auth/verify/resend", json: ["email": "nobody@example.com"])
            #expect(known.status == 202 && unknown.status == 202 && known.body == unknown.body)
            await broker.service.mailer?.flush()
            let second = try #require(try Self.mailedToken(sink, to: "strict@example.com"))
            #expect(first != second)
            #expect(try sink.messages().filter { $0["to"]?.stringValue == "nobody@example.com" }.isEmpty)
            #expect(try await confirm(client, token: first).status == 400, "only the newest link works")
            #expect(try await confirm(client, token: second).status == 200)
            #expect(try await client.login("strict@example.com", Self.password).status == 200)
            // Confirmed: a resend mails nothing more.
            let count = try sink.messages().count
            #expect(try await client.post("/auth/verify/resend", json: ["email": "strict@example.com"]).status == 202)
            await broker.service.mailer?.flush()
            #expect(try sink.messages().count == count)
        }
    }

    @Test func aLinkExpiresAfterADayAndRequiringVerificationNeedsMail() async throws {
        let sink = try await SMTPSink.start()
        let broker = try await Self.broker(sink)
        try await broker.test { client in
            #expect(try await client.register("late@example.com", Self.password).status == 201)
            await broker.service.mailer?.flush()
            let token = try #require(try Self.mailedToken(sink, to: "late@example.com"))
            broker.clock.advance(by: 86_400)
            #expect(try await client.get("/auth/verify?token=" + token).status == 400)
        }
        #expect(throws: ConfigurationError.self) {
            _ = try ServerConfiguration.load(
                catalog: BrokerProviderSchemas.all,
                file: (Array(#"{"server": {"require_verified_email": true}}"#.utf8), "t.json"),
                environment: [:])
        }
        let bare = try await InProcessBroker()
        try await bare.test { client in
            #expect(try await client.post("/auth/verify/resend", json: ["email": "a@example.com"]).status == 404)
            let registered = try await client.register("nomail@example.com", Self.password)
            #expect(registered["verification"] == nil, "no mail, no claim that one was sent")
        }
    }
}
