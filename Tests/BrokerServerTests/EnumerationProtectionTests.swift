import BrokerConfiguration
import BrokerCore
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// `server.enumeration_protection`: registration answers a known and an unknown address alike — status, body,
/// and the same work (the password is hashed either way) — and only the mail to the address differs.
@Suite("registration without account enumeration")
struct EnumerationProtectionTests {
    static let password = "correct horse battery staple"

    static func broker(_ sink: SMTPSink) async throws -> InProcessBroker {
        try await InProcessBroker(
            config: #"""
                {"server": {"enumeration_protection": true},
                 "mail": {"url": "\#(sink.url)", "from": "Broker <broker@example.com>", "max_attempts": 2}}
                """#)
    }

    @Test func knownAndUnknownAddressesGetTheSameAnswerAndOnlyTheMailDiffers() async throws {
        let sink = try await SMTPSink.start()
        let broker = try await Self.broker(sink)
        try await broker.test { client in
            let first = try await client.register("known@example.com", Self.password)
            #expect(first.status == 202 && first["access_token"] == nil && first["user_id"] == nil)
            await broker.service.mailer?.flush()
            #expect(try VerificationTests.mailedToken(sink, to: "known@example.com") != nil, "a new account: its link")

            let again = try await client.register("Known@Example.com", "another long passphrase 7")
            let unknown = try await client.register("unknown@example.com", Self.password)
            #expect(again.status == 202 && unknown.status == 202)
            #expect(again.body == first.body && unknown.body == first.body, "one body for every address")
            #expect(again.header("Cache-Control") == "no-store")
            await broker.service.mailer?.flush()

            let exists = try sink.messages().filter { $0["subject"]?.stringValue == "You already have an account" }
            #expect(exists.map { $0["to"]?.stringValue } == ["known@example.com"])
            let note = try #require(exists.first?["text"]?.stringValue)
            #expect(note.contains("http://broker.test/auth/password/reset?token="), "with a reset link")
            #expect(!note.contains("another long passphrase"))
            let verifications = try sink.messages().filter {
                $0["subject"]?.stringValue == "Confirm your email address"
            }
            #expect(verifications.map { $0["to"]?.stringValue } == ["known@example.com", "unknown@example.com"])

            // Nothing changed on the existing account: its password is the first one.
            #expect(try await client.login("known@example.com", Self.password).status == 200)
            #expect(try await client.login("known@example.com", "another long passphrase 7").status == 401)
            #expect(try await broker.store.users(provider: .custom).count == 2)

            // Input errors do not depend on the address and are answered as before.
            let weak = try await client.register("known@example.com", "short")
            #expect(weak.status == 400 && weak.error == "invalid_request")
            let badAddress = try await client.register("not an address", Self.password)
            #expect(badAddress.status == 400)
        }
    }

    @Test func theNoteToAnOwnerIsRateLimitedSilently() async throws {
        let sink = try await SMTPSink.start()
        let broker = try await Self.broker(sink)
        try await broker.test { client in
            #expect(try await client.register("owner@example.com", Self.password).status == 202)
            for _ in 0..<5 {
                #expect(try await client.register("owner@example.com", Self.password).status == 202)
            }
            await broker.service.mailer?.flush()
            let notes = try sink.messages().filter { $0["subject"]?.stringValue == "You already have an account" }
            #expect(notes.count == 3, "three notes an hour, and the answer never says so")
        }
    }

    @Test func theModeNeedsMail() throws {
        let directory = try TemporaryDirectory.make(prefix: "enumeration")
        let file = directory.appendingPathComponent("broker.json")
        try Data(#"{"server": {"enumeration_protection": true}}"#.utf8).write(to: file)
        #expect {
            try ServerConfiguration.load(catalog: [], path: file.path, environment: [:])
        } throws: { error in
            "\(error)".contains("server.enumeration_protection") && "\(error)".contains("needs a mail section")
        }
    }

}
