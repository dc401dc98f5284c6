import BrokerCore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// `broker exec`: the command runs in broker's place with a fresh token and the broker's URL in its
/// environment; its exit status is the command's; without a session nothing runs.
@Suite("broker exec")
struct ExecTests {
    @Test func theCommandGetsTheTokenAndTheBrokerAndItsStatusPassesThrough() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let marker = try BrokerProcess.temporaryDirectory().appendingPathComponent("ran").path

        // Not signed in: exit 4 and the command never runs.
        let signedOut = try await client.run(["exec", "--", "/bin/sh", "-c", "touch \(marker)"])
        #expect(signedOut.status == 4, "\(signedOut.stderr)")
        #expect(!FileManager.default.fileExists(atPath: marker))

        let registered = try await client.run(
            ["register", "--email", "exec@example.com", "--password-stdin"], stdin: "correct horse battery staple\n")
        #expect(registered.status == 0, "\(registered.stderr)")
        let token = try await client.run(["token"]).stdout.trimmingCharacters(in: .newlines)

        let ran = try await client.run(
            ["exec", "--", "/bin/sh", "-c", #"printf '%s\n%s\n' "$BROKER_TOKEN" "$BROKER_URL"; exit 7"#])
        #expect(ran.status == 7, "the command's exit status is broker's: \(ran.stderr)")
        #expect(ran.stdout == "\(token)\n\(server.url)\n")

        let named = try await client.run([
            "exec", "--env", "API_TOKEN", "--", "/bin/sh", "-c", #"printf %s "$API_TOKEN""#,
        ])
        #expect(named.status == 0)
        #expect(named.stdout == token)

        // Arguments pass as given, spaces and dashes included.
        let arguments = try await client.run(["exec", "--", "/bin/echo", "-n", "a b", "--c"])
        #expect(arguments.stdout == "a b --c")

        let missing = try await client.run(["exec", "--", "/nonexistent/command"])
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("cannot run /nonexistent/command"))
        #expect(try await client.run(["exec"]).status == 64)
        #expect(try await client.run(["exec", "--env", "BAD-NAME", "--", "/bin/true"]).status == 64)
        #expect(try await client.run(["exec", "--env", "BROKER_URL", "--", "/bin/true"]).status == 64)
    }
}
