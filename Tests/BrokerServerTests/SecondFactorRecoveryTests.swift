import BrokerCore
import BrokerCrypto
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// Issue "A second factor", item 2: recovery without a back door — the mailed link to the confirmed address,
/// which then asks for the password; neither alone removes the factor. And the audit trail of every change,
/// read back from the store (`server.audit_store`).
@Suite("A second factor: recovery by mail, and the audit trail")
struct SecondFactorRecoveryTests {
    typealias OP = OpenIDProviderTests
    typealias MFA = SecondFactorTests
    typealias Reply = InProcessBroker.Client.Reply

    static let subject = "Remove the second factor of your account"

    @Test func theMailedLinkAndThePasswordTogetherRemoveALostFactor() async throws {
        let sink = try await SMTPSink.start()
        let broker = try await InProcessBroker(
            config: #"""
                {"server": {"audit_store": true},
                 "mail": {"url": "\#(sink.url)", "from": "Broker <broker@example.com>"}}
                """#)
        try await broker.test { client in
            let (key, _, ada) = try await MFA.enrolled(broker, client, "ada@example.com")
            await broker.service.mailer?.flush()
            let verify = try #require(try VerificationTests.mailedToken(sink, to: "ada@example.com"))
            #expect(try await VerificationTests().confirm(client, token: verify).status == 200)
            // An account with a factor whose address was never confirmed gets no link.
            _ = try await MFA.enrolled(broker, client, "bo@example.com")
            // A session with both factors, which the recovery ends like every other.
            broker.clock.advance(by: 30)
            let strong = try await MFA.login(client, "ada@example.com", otp: MFA.pyotp(key, at: broker.clock.seconds()))
            #expect(strong.status == 200)

            // The same answer for everyone; one mail, to the confirmed address only.
            var answers: [Reply] = []
            for email in ["Ada@Example.com", "bo@example.com", "nobody@example.com"] {
                answers.append(try await client.post("/auth/mfa/recover", json: ["email": .string(email)]))
            }
            #expect(answers.allSatisfy { $0.status == 202 && $0.body == answers[0].body })
            await broker.service.mailer?.flush()
            let token = try #require(
                try sink.mailedToken(to: "ada@example.com", subject: Self.subject, path: "/auth/mfa/recover"))
            #expect(try sink.messages().filter { $0["subject"]?.stringValue == Self.subject }.count == 1)

            // Opening the link spends nothing; a link that is not one says so.
            let jar = OP.Jar()
            _ = try await OP.get(client, "/auth/mfa/recover?token=" + token, jar)
            let page = try await OP.get(client, "/auth/mfa/recover?token=" + token, jar)
            #expect(page.status == 200)
            #expect(String(decoding: page.body, as: UTF8.self).contains("ada@example.com"))
            let bad = try await client.get("/auth/mfa/recover?token=" + String(repeating: "A", count: 43))
            #expect(bad.status == 400 && String(decoding: bad.body, as: UTF8.self).contains("no longer works"))

            func submit(_ page: Reply, password: String, jar: OP.Jar) async throws -> Reply {
                try await OP.post(
                    client, "/auth/mfa/recover/confirm",
                    [
                        ("token", token), ("csrf", try #require(PasskeyTests.hidden(page, "csrf"))),
                        ("password", password),
                    ], jar)
            }
            // The mailbox alone: a wrong password removes nothing, the link stays good.
            let wrong = try await submit(page, password: "not the password at all", jar: jar)
            #expect(wrong.status == 401 && String(decoding: wrong.body, as: UTF8.self).contains("not the account"))
            #expect(try await broker.store.totpFactor(user: ada) != nil)
            // Another browser's form (no CSRF cookie) removes nothing either.
            let stranger = try await submit(page, password: OP.password, jar: OP.Jar())
            #expect(stranger.status == 403)
            #expect(try await broker.store.totpFactor(user: ada) != nil)

            // Both: the factor and its codes go, every session ends, the password alone signs in again.
            let removed = try await submit(wrong, password: OP.password, jar: jar)
            #expect(removed.status == 200, "\(String(decoding: removed.body, as: UTF8.self))")
            #expect(try await broker.store.totpFactor(user: ada) == nil)
            #expect(try await broker.store.recoveryCodesLeft(user: ada) == 0)
            #expect(try await broker.store.sessions(user: ada).allSatisfy { $0.revokedAt != nil })
            #expect(try await MFA.login(client, "ada@example.com").status == 200)
            let again = try await OP.get(client, "/auth/mfa/recover?token=" + token, OP.Jar())
            #expect(again.status == 400, "the link worked once")
            await broker.service.mailer?.flush()
            let notice = try sink.messages().last {
                $0["subject"]?.stringValue == "The second factor of your account changed"
            }
            #expect(notice?["text"]?.stringValue?.contains("mailed recovery link") == true)

            // Every change is in the audit trail.
            await broker.service.context.audit.flush()
            let events = try await broker.store.auditEvents(user: ada, since: nil, limit: 100).map(\.event)
            for event in ["second_factor_added", "second_factor_recovery_requested", "second_factor_removed"] {
                #expect(events.contains(event), "\(event) in \(events)")
            }
            let documents = try await broker.store.auditEvents(user: ada, since: nil, limit: 100)
                .filter { $0.event == "second_factor_removed" }.compactMap { JSONValue.parse(Array($0.document.utf8)) }
            #expect(documents.contains { $0["outcome"] == "failure" && $0["reason"] == "wrong_password" })
            #expect(documents.contains { $0["outcome"] == "success" && $0["via"] == "mail" })
        }
    }

    @Test func withoutMailThereIsNoLinkToAskFor() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let asked = try await client.post("/auth/mfa/recover", json: ["email": "ada@example.com"])
            #expect(asked.status == 404 && asked["error_description"]?.stringValue?.contains("no mail") == true)
            #expect(try await client.get("/auth/mfa/recover").status == 404)
        }
    }
}
