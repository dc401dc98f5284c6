import BrokerCore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// The CLI with the desktop keyring (issue "Keyring"), as a person runs it: Debian's gnome-keyring on a
/// private session bus, Python secretstorage as the independent reader. Refresh tokens and DPoP keys go to
/// the keyring and nowhere else; a locked or silent keyring is exit 4 with what to do, never a wait; `auto`
/// without one says so once; sessions move when the setting changes; single-flight refresh holds.
@Suite("the CLI's secrets in the desktop keyring", .serialized)
struct KeyringTests {
    /// Every file under `home`, read as text (keys included), with its path.
    static func files(under home: String) -> [(String, String)] {
        let enumerator = FileManager.default.enumerator(atPath: home)
        var found: [(String, String)] = []
        while let name = enumerator?.nextObject() as? String {
            let path = home + "/" + name
            var directory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path, isDirectory: &directory), !directory.boolValue {
                found.append(
                    (name, String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self)))
            }
        }
        return found
    }

    static func broker(_ keyring: KeyringSession, url: String) -> [String: String] {
        keyring.environment.merging(["BROKER_URL": url]) { $1 }
    }

    @Test func theRefreshTokenAndTheDPoPKeyLiveInTheKeyringAndNowhereElse() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let keyring = try await KeyringSession.start()
        defer { keyring.close() }
        let client = try ClientHome(server: server)
        let bus = keyring.environment
        let registered = try await client.register("kr@example.com", environment: bus)
        #expect(!registered.stderr.contains("no usable desktop keyring"), "\(registered.stderr)")

        let whoami = try await client.run(["whoami", "--json"], environment: bus)
        let me = try #require(JSONValue.parse(Array(whoami.stdout.utf8)), "\(whoami.stderr)")
        #expect(me["credential_store"] == "keyring" && me["dpop_bound"] == true, "\(whoami.stdout)")

        let items = try await keyring.items()
        #expect(Set(items.compactMap { $0.attributes["kind"] }) == ["refresh_token", "dpop_key"], "\(items)")
        for item in items {
            #expect(item.attributes["service"] == "broker" && item.attributes["profile"] == "default")
            #expect(item.attributes["broker"] == server.url && item.attributes["home"] == client.home)
        }
        let refresh = try #require(items.first { $0.attributes["kind"] == "refresh_token" }?.secret)
        #expect(items.first { $0.attributes["kind"] == "dpop_key" }?.secret.contains("PRIVATE KEY") == true)
        for (name, text) in Self.files(under: client.home) {
            #expect(!text.contains(refresh), "the refresh token is in \(name)")
            #expect(!text.contains("PRIVATE KEY"), "a private key is in \(name)")
        }
        #expect(client.fileText().contains("\"secrets\":\"keyring\""), "\(client.fileText())")
        #expect(try client.cached()?.accessToken.exposed.isEmpty == false, "the access token stays in the file")

        // A refresh reads the token from the keyring and puts the rotated one back.
        try client.ageSession()
        let refreshed = try await client.run(["token", "--min-valid", "7200"], environment: bus)
        #expect(refreshed.status == 0, "\(refreshed.stderr)")
        let rotated = try #require(try await keyring.items().first { $0.attributes["kind"] == "refresh_token" })
        #expect(rotated.secret != refresh && !client.fileText().contains(rotated.secret))
        // A bound token at the broker: the proof's key comes from the keyring.
        let profile = try await client.run(["whoami"], environment: bus)
        #expect(profile.status == 0 && profile.stdout.contains("in the desktop keyring"), "\(profile.stdout)")

        let out = try await client.run(["logout"], environment: bus)
        #expect(out.status == 0, "\(out.stderr)")
        #expect(try await keyring.items().isEmpty, "logout removes the keyring's items")
    }

    /// Locked, paused mid-session, stopped: `broker token` answers exit 4 with what to do — never a prompt,
    /// never a wait past its deadline; unlocked again, it works.
    @Test func aKeyringThatCannotAnswerIsExitFourWithWhatToDo() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let keyring = try await KeyringSession.start()
        defer { keyring.close() }
        let client = try ClientHome(server: server)
        let bus = keyring.environment
        try await client.register("lock@example.com", environment: bus)
        try client.ageSession()
        let warm = try #require(try client.cached()).accessToken.exposed

        try await keyring.command("lock")
        let locked = try await client.run(["token", "--min-valid", "7200"], environment: bus)
        #expect(locked.status == 4, "\(locked.stderr)")
        #expect(locked.stderr.contains("is locked") && locked.stderr.contains("unlock it"), "\(locked.stderr)")
        // A token that is still good needs no keyring at all (the warm path reads the file).
        let stillGood = try await client.run(["token"], environment: bus)
        #expect(stillGood.status == 0 && stillGood.stdout == warm + "\n", "\(stillGood.stderr)")
        #expect(try client.cached()?.secretsInKeyring == true, "nothing moved out of the locked keyring")

        try await keyring.command("unlock")
        try await keyring.command("pause")
        let silent = try await client.run(["token", "--min-valid", "7200"], environment: bus)
        #expect(silent.status == 4 && silent.stderr.contains("no answer in time"), "\(silent.stderr)")
        try await keyring.command("resume")
        let back = try await client.run(["token", "--min-valid", "7200"], environment: bus)
        #expect(back.status == 0 && back.stdout != warm + "\n", "\(back.stderr)")

        try await keyring.command("stop")
        try client.ageSession()
        let gone = try await client.run(["token", "--min-valid", "7200"], environment: bus)
        #expect(gone.status == 4 && gone.stderr.contains("cannot be used"), "\(gone.stderr)")
        #expect(try client.cached() != nil, "the session is kept for when the keyring is back")
    }

    /// `auto` without a keyring: the file, and one notice per BROKER_HOME; `keyring` without one: refused
    /// before signing in.
    @Test func withoutAKeyringAutoSaysSoOnceAndKeyringRefuses() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let first = try await client.register("nokr@example.com")
        #expect(
            first.stderr.contains("no usable desktop keyring") && first.stderr.contains("shown once"), "\(first.stderr)"
        )
        let again = try await client.run(
            ["login", "--email", "nokr@example.com", "--password-stdin"], stdin: "correct horse battery staple\n")
        #expect(again.status == 0 && !again.stderr.contains("no usable desktop keyring"), "\(again.stderr)")
        let me = try await client.run(["whoami", "--json"])
        #expect(JSONValue.parse(Array(me.stdout.utf8))?["credential_store"] == "file", "\(me.stdout)")
        #expect(try client.cached()?.refreshToken != nil)

        let other = try ClientHome(server: server)
        let strict = try await other.run(
            ["login", "--email", "nokr@example.com", "--password-stdin"], stdin: "correct horse battery staple\n",
            environment: ["BROKER_CREDENTIAL_STORE": "keyring"])
        #expect(strict.status == 1, "\(strict.stderr)")
        #expect(strict.stderr.contains("credential_store is \"keyring\""), "\(strict.stderr)")
        #expect(try other.cached() == nil && !FileManager.default.fileExists(atPath: other.home + "/keys"))
        let bad = try await other.run(["token"], environment: ["BROKER_CREDENTIAL_STORE": "vault"])
        #expect(bad.status == 64 && bad.stderr.contains("BROKER_CREDENTIAL_STORE"), "\(bad.stderr)")
    }

    /// Changing the setting moves the session's secrets at its next use, both ways, losing nothing.
    @Test func sessionsMoveWhenTheSettingChanges() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let keyring = try await KeyringSession.start()
        defer { keyring.close() }
        let client = try ClientHome(server: server)
        let file = keyring.environment.merging(["BROKER_CREDENTIAL_STORE": "file"]) { $1 }
        let vault = keyring.environment.merging(["BROKER_CREDENTIAL_STORE": "keyring"]) { $1 }
        try await client.register("move@example.com", environment: file)
        let inFile = try #require(try client.cached()?.refreshToken?.exposed)
        #expect(try await keyring.items().isEmpty)
        #expect(Self.files(under: client.home).contains { $0.1.contains("PRIVATE KEY") })

        let moved = try await client.run(["whoami", "--json"], environment: vault)
        #expect(JSONValue.parse(Array(moved.stdout.utf8))?["credential_store"] == "keyring", "\(moved.stderr)")
        let items = try await keyring.items()
        #expect(items.first { $0.attributes["kind"] == "refresh_token" }?.secret == inFile)
        for (name, text) in Self.files(under: client.home) {
            #expect(!text.contains(inFile) && !text.contains("PRIVATE KEY"), "left in \(name)")
        }

        // (A warm `broker token` only reads the file: the launcher moves nothing. A refresh does.)
        try client.ageSession()
        let back = try await client.run(["token", "--min-valid", "7200"], environment: file)
        #expect(back.status == 0, "\(back.stderr)")
        #expect(try await keyring.items().isEmpty, "moved out, nothing left behind")
        let restored = try client.cached()
        #expect(restored?.refreshToken != nil && restored?.secretsInKeyring == false)
        let after = try await client.run(["whoami", "--json"], environment: file)
        #expect(JSONValue.parse(Array(after.stdout.utf8))?["dpop_bound"] == true, "the same key, back in its file")
        #expect(after.status == 0, "\(after.stderr)")
    }

    @Test func twentyConcurrentRefreshesWithTheKeyringMakeOne() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let keyring = try await KeyringSession.start()
        defer { keyring.close() }
        let client = try ClientHome(server: server)
        let bus = keyring.environment
        try await client.register("many-kr@example.com", environment: bus)
        try client.ageSession()
        let results = try await withThrowingTaskGroup(of: CLI.Result.self) { group in
            for _ in 0..<20 {
                group.addTask { try await client.run(["token", "--min-valid", "7200"], environment: bus) }
            }
            var all = [CLI.Result]()
            for try await result in group { all.append(result) }
            return all
        }
        for result in results { #expect(result.status == 0, "\(result.stderr)") }
        #expect(Set(results.map(\.stdout)).count == 1, "every process printed the one refreshed token")
        #expect(refreshRequests(server) == 1, "single-flight: exactly one refresh request")
        #expect(try await keyring.items().filter { $0.attributes["kind"] == "refresh_token" }.count == 1)
    }

    static let password = "correct horse battery staple"

    /// `broker login --email EMAIL` on a pseudo-terminal (pty_session.py), the password typed at its prompt, as
    /// a person signs in: its exit status and what the terminal showed.
    static func loginOnATerminal(_ client: ClientHome, _ email: String, environment: [String: String]) async throws
        -> (status: Int64?, transcript: String)
    {
        let script: JSONValue = [["Password: ", .string(password)]]
        let result = try await ProcessRunner.run(
            "/usr/bin/env",
            [
                "python3", TestPaths.interop("pty_session.py"), script.serialized(), "--", BrokerProcess.binary,
                "login", "--email", email,
            ],
            environment: client.environment.merging(environment) { $1 })
        let outcome = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout) \(result.stderr)")
        return (outcome["status"]?.intValue, outcome["transcript"]?.stringValue ?? "")
    }

    /// `broker login` on a terminal may ask a locked keyring to unlock: `Unlock`, then the desktop's prompt, then
    /// it waits for the person's answer (the prompt's `Completed` signal) and keeps nothing before it. A command
    /// off the terminal never asks. (The Secret Service of the tests' own: gnome-keyring needs a display to
    /// prompt.)
    @Test func loginOnATerminalWaitsForTheKeyringsUnlockPrompt() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let keyring = try await KeyringSession.startFake()
        defer { keyring.close() }
        let client = try ClientHome(server: server)
        let bus = keyring.environment
        try await client.register("prompt@example.com", environment: bus)
        let first = try #require(try await keyring.items().first { $0.attributes["kind"] == "refresh_token" })

        try await keyring.command("lock")
        try await keyring.command("prompts hold")
        try client.ageSession()
        let quick = try await client.run(["token", "--min-valid", "7200"], environment: bus)
        #expect(quick.status == 4 && quick.stderr.contains("is locked"), "\(quick.stderr)")
        #expect(try await !keyring.calls().contains("Unlock"), "a command off a terminal never asks to unlock")

        let before = try #require(try client.cached()).accessToken
        async let login = Self.loginOnATerminal(client, "prompt@example.com", environment: bus)
        try await keyring.command("wait-prompt")
        // The prompt is up: the broker said yes, but nothing is kept until the person answers.
        #expect(try client.cached()?.accessToken == before)
        #expect(try await keyring.items().first { $0.attributes["kind"] == "refresh_token" }?.secret == first.secret)
        try await keyring.command("complete accept")
        let (status, transcript) = try await login
        #expect(status == 0, "\(transcript)")
        #expect(!transcript.contains("no usable desktop keyring"), "\(transcript)")
        let calls = try await keyring.calls()
        let unlock = try #require(calls.firstIndex(of: "Unlock"), "\(calls)")
        #expect(calls[unlock...].contains("Prompt"), "\(calls)")

        let kept = try #require(try await keyring.items().first { $0.attributes["kind"] == "refresh_token" })
        #expect(kept.secret != first.secret, "the new session's refresh token is in the keyring")
        #expect(try client.cached()?.secretsInKeyring == true && client.cached()?.accessToken != before)
        #expect(!client.fileText().contains(kept.secret))
        try client.ageSession()
        let unlocked = try await client.run(["token", "--min-valid", "7200"], environment: bus)
        #expect(unlocked.status == 0, "\(unlocked.stderr)")
    }

    /// A prompt nobody answers yes to — Debian's gnome-keyring with no prompter to show (an SSH session, no
    /// display) dismisses it at once: `auto` keeps the session in the file and says so; `keyring` refuses before
    /// signing in.
    @Test func aDismissedUnlockPromptIsTheFileUnderAutoAndARefusalUnderKeyring() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let keyring = try await KeyringSession.start()
        defer { keyring.close() }
        let owner = try ClientHome(server: server)
        try await owner.register("dismissed@example.com", environment: ["BROKER_CREDENTIAL_STORE": "file"])
        try await keyring.command("lock")

        let auto = try ClientHome(server: server)
        let (status, transcript) = try await Self.loginOnATerminal(
            auto, "dismissed@example.com", environment: keyring.environment)
        #expect(status == 0, "\(transcript)")
        #expect(
            transcript.contains("no usable desktop keyring (it is locked)")
                && transcript.contains("kept in"), "\(transcript)")
        #expect(try auto.cached()?.refreshToken != nil && auto.cached()?.secretsInKeyring == false)

        let strict = try ClientHome(server: server)
        let refused = try await Self.loginOnATerminal(
            strict, "dismissed@example.com",
            environment: keyring.environment.merging(["BROKER_CREDENTIAL_STORE": "keyring"]) { $1 })
        #expect(refused.status == 1, "\(refused.transcript)")
        #expect(refused.transcript.contains("credential_store is \"keyring\" but"), "\(refused.transcript)")
        #expect(!refused.transcript.contains("<<typed>>"), "refused before asking for the password")
        #expect(try strict.cached() == nil)
        #expect(try await keyring.items().isEmpty)
    }

    /// A keyring that opened but refuses a write: under `auto` the session is kept in the file with the notice
    /// (never lost, never half in the keyring); under `keyring` the move is exit 4 and the session stays where
    /// it was; once writes work, it moves.
    @Test func aKeyringThatRefusesAWriteLosesNothing() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let keyring = try await KeyringSession.startFake()
        defer { keyring.close() }
        let client = try ClientHome(server: server)
        try await keyring.command("fail-writes on")
        let registered = try await client.register("full@example.com", environment: keyring.environment)
        #expect(
            registered.stderr.contains("no usable desktop keyring") && registered.stderr.contains("refuses writes"),
            "\(registered.stderr)")
        let session = try #require(try client.cached())
        #expect(session.refreshToken != nil && !session.secretsInKeyring)
        #expect(Self.files(under: client.home).contains { $0.1.contains("PRIVATE KEY") }, "the DPoP key too")
        #expect(try await keyring.items().isEmpty, "nothing half in the keyring")

        let strict = keyring.environment.merging(["BROKER_CREDENTIAL_STORE": "keyring"]) { $1 }
        let refused = try await client.run(["whoami"], environment: strict)
        #expect(refused.status == 4 && refused.stderr.contains("refuses writes"), "\(refused.stderr)")
        #expect(try client.cached()?.refreshToken == session.refreshToken, "the session stays in the file")
        #expect(try await keyring.items().isEmpty)

        try await keyring.command("fail-writes off")
        let moved = try await client.run(["whoami", "--json"], environment: strict)
        #expect(JSONValue.parse(Array(moved.stdout.utf8))?["credential_store"] == "keyring", "\(moved.stderr)")
        let items = try await keyring.items()
        #expect(items.first { $0.attributes["kind"] == "refresh_token" }?.secret == session.refreshToken?.exposed)
        #expect(!client.fileText().contains(session.refreshToken?.exposed ?? "-"))
    }

    /// The issue's own setting, literally: the CLI inside Debian's `dbus-run-session`, gnome-keyring started and
    /// unlocked in it (as a session without a desktop does), secretstorage reading what the CLI stored.
    @Test func insideDbusRunSession() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let scratch = try TemporaryDirectory.make(prefix: "dbus-run-session").path
        for folder in ["/home/.local/share", "/run"] {
            try FileManager.default.createDirectory(atPath: scratch + folder, withIntermediateDirectories: true)
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: scratch + "/run")
        let script = """
            printf %s keyring-password | gnome-keyring-daemon --unlock --components=secrets --daemonize >/dev/null \
                || exit 90
            printf '%s\\n' "$PASSWORD" | "$BROKER" register --email drs@example.com --password-stdin || exit 91
            "$BROKER" whoami --json || exit 92
            python3 -c 'import json, secretstorage
            items = secretstorage.get_default_collection(secretstorage.dbus_init()).get_all_items()
            print(json.dumps([dict(item.get_attributes(), secret=item.get_secret().decode()) for item in items]))'
            """
        let result = try await ProcessRunner.run(
            "/usr/bin/dbus-run-session", ["--", "sh", "-c", script],
            environment: client.environment.merging([
                "HOME": scratch + "/home", "XDG_DATA_HOME": scratch + "/home/.local/share",
                "XDG_RUNTIME_DIR": scratch + "/run", "PASSWORD": Self.password, "BROKER": BrokerProcess.binary,
            ]) { $1 })
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        let me = try #require(lines.count == 2 ? JSONValue.parse(Array(lines[0].utf8)) : nil, "\(result.stdout)")
        #expect(me["credential_store"] == "keyring", "\(lines[0])")
        let items = try #require(JSONValue.parse(Array(lines[1].utf8))?.arrayValue, "\(result.stdout)")
        #expect(Set(items.compactMap { $0["kind"]?.stringValue }) == ["refresh_token", "dpop_key"], "\(items)")
        let refresh = try #require(items.first { $0["kind"] == "refresh_token" }?["secret"]?.stringValue)
        #expect(refresh.count > 20 && !result.stderr.contains("no usable desktop keyring"))
        for (name, text) in Self.files(under: client.home) {
            #expect(!text.contains(refresh) && !text.contains("PRIVATE KEY"), "a secret is in \(name)")
        }
    }
}
