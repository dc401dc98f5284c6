import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// `broker serve` and `broker keys` refusing what they cannot use: exit 1, the reason, nothing changed.
@Suite("configuration errors, as the commands report them")
struct ConfigurationCommandTests {
    @Test(arguments: [
        ("missing", "cannot read"),
        (#"{"server": {"access_token_ttl": 3}}"#, "server.access_token_ttl: must be at least 5"),
        (#"{"server": {"port": true}}"#, "server.port: must be an integer"),
        (#"{"providers": {"gitlub": {}}}"#, "providers.gitlub: unknown provider"),
        (#"{"providers": {"github": {}}}"#, "providers.github.client_id: is required"),
        (
            #"{"providers": {"apple": {"client_id": "c", "team_id": "ABCDE12345", "key_id": "KEY1234567", "private_key_file": "/nonexistent.p8"}}}"#,
            "providers.apple.private_key_file: cannot read /nonexistent.p8"
        ),
        (
            #"{"providers": {"apple": {"client_id": "c", "team_id": "ABCDE12345", "key_id": "KEY1234567", "private_key_file": "/etc/hostname"}}}"#,
            "providers.apple's key"
        ),
        (
            #"{"providers": {"corp": {"type": "oidc", "issuer": "https://c.example", "client_id": "c", "client_secret": "s", "icon_file": "/etc/hostname"}}}"#,
            "providers.corp.icon_file: the icon must be a PNG, JPEG, WebP or SVG image"
        ),
        (
            #"{"providers": {"corp": {"type": "oidc", "issuer": "https://c.example", "client_id": "c", "client_secret_file": "/nonexistent"}}}"#,
            "providers.corp.client_secret_file: cannot read /nonexistent"
        ),
        ("{not json", "not valid JSON"),
    ])
    func serveRefusesABadConfigWithExitOne(text: String, says: String) async throws {
        let directory = try BrokerProcess.temporaryDirectory()
        let path = directory.appendingPathComponent("broker.json").path
        if text != "missing" { try Data(text.utf8).write(to: URL(fileURLWithPath: path)) }
        let result = try await CLI.run([
            "serve", "--config", path, "--port", "0", "--data-dir", directory.appendingPathComponent("data").path,
        ])
        #expect(result.status == 1)
        #expect(result.stdout.isEmpty)
        #expect(result.stderr.contains(path) && result.stderr.contains(says), "\(result.stderr)")
        #expect(
            !FileManager.default.fileExists(atPath: directory.appendingPathComponent("data").path), "nothing created")
    }

    @Test func aCorruptKeyRingIsReportedAndKept() async throws {
        let directory = try BrokerProcess.temporaryDirectory()
        let keys = directory.appendingPathComponent("data/keys")
        try FileManager.default.createDirectory(at: keys, withIntermediateDirectories: true)
        try Data("{broken".utf8).write(to: keys.appendingPathComponent("keyring.json"))
        let result = try await CLI.run([
            "serve", "--port", "0", "--data-dir", directory.appendingPathComponent("data").path,
        ])
        #expect(result.status == 1)
        #expect(result.stderr.contains("keyring.json is not valid JSON"), "\(result.stderr)")
        #expect(try String(contentsOf: keys.appendingPathComponent("keyring.json"), encoding: .utf8) == "{broken")
        let rotate = try await CLI.run(["keys", "rotate", "--data-dir", directory.appendingPathComponent("data").path])
        #expect(rotate.status == 1 && rotate.stdout.isEmpty)
        #expect(try String(contentsOf: keys.appendingPathComponent("keyring.json"), encoding: .utf8) == "{broken")
    }

    @Test func postgresIsRefusedClearlyForNow() async throws {
        let directory = try BrokerProcess.temporaryDirectory()
        let result = try await CLI.run([
            "serve", "--port", "0", "--data-dir", directory.path + "/d", "--database", "postgres://localhost/broker",
        ])
        #expect(result.status == 1 && result.stderr.contains("PostgreSQL"))
    }
}
