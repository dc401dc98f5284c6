import BrokerClient
import BrokerCore
import BrokerHTTP
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

@Suite("deleting and exporting one's own account with the CLI")
struct AccountSelfServiceCommandTests {
    static let password = "correct horse battery staple"

    @Test func theCommandsAsAPersonRunsThem() async throws {
        let directory = try BrokerProcess.temporaryDirectory()
        let auditPath = directory.appendingPathComponent("audit.log").path
        let server = try await BrokerProcess.start(
            config: #"{"server": {"audit_log": "\#(auditPath)", "audit_store": true}}"#, directory: directory)
        defer { server.stop() }
        let client = try ClientHome(server: server)
        try await client.register("cli-leaving@example.com", password: Self.password)
        let userID = try #require(try client.cached()?.userID.description)

        let export = try await client.run(["account", "export"])
        #expect(export.status == 0, "\(export.stderr)")
        let document = try #require(JSONValue.parse(Array(export.stdout.utf8)))
        #expect(document["user"]?["user_id"]?.stringValue == userID)
        #expect(
            document["audit_events"]?.arrayValue?.contains { $0["event"]?.stringValue == "registration" } == true,
            "the audit events about the user come along")

        let unconfirmed = try await client.run(["account", "delete", "--password-stdin"], stdin: Self.password)
        #expect(unconfirmed.status == 64, "no terminal, no --yes: nothing deleted")
        let wrong = try await client.run(["account", "delete", "--yes", "--password-stdin"], stdin: "wrong password")
        #expect(wrong.status == 1)
        #expect(wrong.stderr.contains("wrong password"))
        let deleted = try await client.run(["account", "delete", "--yes", "--password-stdin"], stdin: Self.password)
        #expect(deleted.status == 0, "\(deleted.stderr)")
        #expect(try client.cached() == nil, "the local session goes too")
        #expect(try await client.run(["account", "export"]).status == 4)
        let events = try String(contentsOfFile: auditPath, encoding: .utf8).split(separator: "\n").compactMap {
            JSONValue.parse(Array($0.utf8))
        }
        #expect(
            events.contains {
                $0["event"] == "account_deleted" && $0["outcome"] == "success" && $0["user_id"]?.stringValue == userID
            })
        #expect(events.contains { $0["event"] == "account_deleted" && $0["outcome"] == "failure" })
    }
}
