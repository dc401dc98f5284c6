import BrokerClient
import BrokerCore
import BrokerHTTP
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

@Suite("registration without account enumeration, as the CLI shows it")
struct EnumerationProtectionCommandTests {
    static let password = "correct horse battery staple"

    @Test func theCLISaysToCheckTheMail() async throws {
        let sink = try await SMTPSink.start()
        let server = try await BrokerProcess.start(
            config: #"""
                {"server": {"enumeration_protection": true},
                 "mail": {"url": "\#(sink.url)", "from": "Broker <broker@example.com>"}}
                """#)
        defer { server.stop() }
        let client = try ClientHome(server: server)
        for _ in 0..<2 {
            let result = try await client.run(
                ["register", "--email", "cli@example.com", "--password-stdin"], stdin: Self.password + "\n")
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stderr.contains("Check the mail to cli@example.com"), "\(result.stderr)")
            #expect(try client.cached() == nil, "no session until the address is confirmed and signed in")
        }
    }
}
