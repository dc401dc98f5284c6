import BrokerClient
import BrokerCore
import BrokerCredentials
import BrokerCrypto
import BrokerSystem
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

@Suite("the broker CLI against a real broker serve")
struct CLISessionTests {
    /// DPoP (issue "Logout everywhere…" item 5): the CLI binds its sessions to a key of its own, kept apart from
    /// the credentials file (0600 in a 0700 folder); a copy of credentials.json elsewhere signs nobody in — its
    /// refresh token is refused without the key and spends nothing — while the owner's CLI goes on; logout
    /// removes the key.
    @Test func aCopiedCredentialsFileIsUselessWithoutTheProfilesKey() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let owner = try ClientHome(server: server)
        try await owner.register("copied@example.com")
        let session = try #require(try owner.cached())
        #expect(isDPoPBound(session.accessToken), "the CLI's token is bound (cnf.jkt)")
        let keys = DPoPKeyStore(home: owner.home)
        let keyFile = keys.path(for: SessionKey(brokerURL: owner.url, profile: "default"))
        #expect(PosixFile.mode(keyFile).map { $0 & 0o777 } == 0o600)
        #expect(PosixFile.mode(keys.directory).map { $0 & 0o777 } == 0o700)
        let credentials = try String(contentsOfFile: owner.credentials, encoding: .utf8)
        #expect(!credentials.contains("PRIVATE KEY"), "the key is not in the credentials file")
        #expect(try await server.me(session.accessToken.exposed).status == 401, "not usable as a plain Bearer token")
        #expect(try await server.me(session.accessToken.exposed, heldBy: owner).status == 200)
        let whoami = try await owner.run(["whoami", "--json"])
        #expect(JSONValue.parse(Array(whoami.stdout.utf8))?["dpop_bound"] == true, "\(whoami.stdout)")
        let listed = try await CLI.run(["sessions", "list", "--json", "--data-dir", server.dataDirectory])
        let ownerKey = try #require(try keys.load(SessionKey(brokerURL: owner.url, profile: "default")))
        let entries = JSONValue.parse(Array(listed.stdout.utf8))?["sessions"]?.arrayValue ?? []
        #expect(
            entries.contains { $0["dpop_jkt"]?.stringValue == (try? ownerKey.thumbprint()) },
            "broker sessions list names the key: \(listed.stdout)")

        let thief = try ClientHome(server: server)
        try FileManager.default.createDirectory(atPath: thief.home, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: owner.credentials, toPath: thief.credentials)
        let stolen = try await thief.run(["whoami"])
        #expect(stolen.status == 4, "\(stolen.stderr)")
        let refreshed = try await thief.run(["token", "--min-valid", "100000"])
        #expect(refreshed.status == 4 && refreshed.stdout.isEmpty, "\(refreshed.stderr)")

        // The owner's session is whole: its refresh token was not spent by the thief's attempt.
        let refresh = try #require(session.refreshToken?.exposed)
        let fields = [("grant_type", "refresh_token"), ("refresh_token", refresh), ("client_id", "broker-cli")]
        let bare = try await server.form("/auth/token", fields)
        #expect(bare.status == 400 && bare["error"]?.stringValue == "invalid_dpop_proof")
        let key = try #require(try keys.load(SessionKey(brokerURL: owner.url, profile: "default")))
        let proof = try DPoPProof.make(
            key: key, method: "POST", url: server.url + "/auth/token", now: SystemClock().seconds())
        let rotated = try await server.post(
            "/auth/token", body: Array(FormEncoding.encode(fields).utf8),
            contentType: "application/x-www-form-urlencoded", headers: [(name: "DPoP", value: proof)])
        #expect(rotated.status == 200 && rotated["token_type"]?.stringValue == "DPoP")
        #expect(try await owner.run(["logout"]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: keyFile), "logout removes the key")
    }

    @Test func registerWhoamiTokenLogout() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)

        let registered = try await client.run(
            ["register", "--email", " Ada@Example.com ", "--name", "Ada", "--password-stdin"],
            stdin: "correct horse battery staple\n"
        )
        #expect(registered.status == 0, "\(registered.stderr)")
        #expect(registered.stdout.isEmpty, "stdout carries only data")
        #expect(registered.stderr.contains("Registered and signed in as custom:"))
        #expect(!registered.stderr.contains("correct horse"))
        #expect(!client.fileText().contains("correct horse"), "the password is never stored client-side")

        // The store: 0600 in a 0700 folder.
        let fileMode = try FileManager.default.attributesOfItem(atPath: client.credentials)[.posixPermissions] as? Int
        let dirMode = try FileManager.default.attributesOfItem(atPath: client.home)[.posixPermissions] as? Int
        #expect(fileMode == 0o600)
        #expect(dirMode == 0o700)

        let who = try await client.run(["whoami"])
        #expect(who.status == 0, "\(who.stderr)")
        let session = try #require(try client.cached())
        #expect(who.stdout.contains("user      \(session.userID)"))
        #expect(who.stdout.contains("email     ada@example.com (not confirmed)"), "\(who.stdout)")
        #expect(who.stdout.contains("name      Ada"))
        #expect(who.stdout.contains("expires   in 59 min") || who.stdout.contains("expires   in 1 h 0 min"))
        #expect(who.stdout.contains("profile   default"))

        let whoJSON = try await client.run(["whoami", "--json"])
        let whoDocument = try #require(JSONValue.parse(Array(whoJSON.stdout.utf8)))
        #expect(whoDocument["user_id"]?.stringValue == session.userID.description)
        #expect(whoDocument["broker"]?.stringValue == server.url)
        #expect(whoDocument["verified"]?.boolValue == true)
        #expect(whoDocument["email_verified"]?.boolValue == false)

        let raw = try await client.run(["token"])
        #expect(raw.status == 0)
        let token = raw.stdout.trimmingCharacters(in: .newlines)
        #expect(raw.stdout == token + "\n")
        #expect(token == session.accessToken.exposed)
        #expect(try await server.me(token, heldBy: client).status == 200)

        let header = try await client.run(["token", "--format", "header"])
        #expect(header.stdout == "Authorization: Bearer \(token)\n")

        let json = try await client.run(["token", "--format", "json"])
        let document = try #require(JSONValue.parse(Array(json.stdout.utf8)))
        #expect(document["access_token"]?.stringValue == token)
        #expect(document["user_id"]?.stringValue == session.userID.description)
        #expect(document["refresh_token"] == nil, "json is the session without its refresh token")

        let exec = try await client.run(["token", "--format", "exec-credential"])
        let credential = try #require(JSONValue.parse(Array(exec.stdout.utf8)))
        #expect(credential["apiVersion"]?.stringValue == "client.authentication.k8s.io/v1")
        #expect(credential["kind"]?.stringValue == "ExecCredential")
        #expect(credential["status"]?["token"]?.stringValue == token)
        let stamp = try #require(credential["status"]?["expirationTimestamp"]?.stringValue)
        #expect(stamp == RFC3339.format(epochSeconds: session.expiresAt))
        let parsed = try #require(ISO8601DateFormatter().date(from: stamp))
        #expect(Int64(parsed.timeIntervalSince1970) == session.expiresAt)

        let refreshToken = try #require(session.refreshToken)
        let logout = try await client.run(["logout"])
        #expect(logout.status == 0, "\(logout.stderr)")
        #expect(try client.cached() == nil)
        // Revoked at the broker too.
        let reuse = try await server.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refreshToken.exposed)])
        #expect(reuse.status == 400)

        let after = try await client.run(["token"])
        #expect(after.status == 4)
        #expect(after.stdout.isEmpty)
        #expect(after.stderr.contains("not signed in"))
        #expect(after.stderr.contains("run: broker login"))
        #expect(try await client.run(["whoami"]).status == 4)
        // Logging out twice is fine.
        #expect(try await client.run(["logout"]).status == 0)
    }

    @Test func loginAndUsageErrors() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)
        try await client.register("grace@example.com")
        #expect(try await client.run(["logout"]).status == 0)

        let wrong = try await client.run(
            ["login", "--email", "grace@example.com", "--password-stdin"], stdin: "not the password")
        #expect(wrong.status == 1)
        #expect(wrong.stderr.contains("wrong email or password"))
        #expect(try client.cached() == nil)

        let good = try await client.run(
            ["login", "--provider", "custom", "--email", "grace@example.com", "--password-stdin"],
            stdin: "correct horse battery staple"
        )
        #expect(good.status == 0, "\(good.stderr)")
        #expect(try client.cached()?.provider == .custom)

        let noTerminal = try await client.run(["login", "--provider", "custom", "--email", "grace@example.com"])
        #expect(noTerminal.status == 64)
        #expect(noTerminal.stderr.contains("--password-stdin"))

        let noProvider = try await client.run(["login"])
        #expect(noProvider.status == 64)
        #expect(noProvider.stderr.contains("--provider"))

        let unknown = try await client.run(["login", "--provider", "myspace"])
        #expect(unknown.status == 64)
        #expect(unknown.stderr.contains("unknown provider id"))

        let duplicate = try await client.run(
            ["register", "--email", "grace@example.com", "--password-stdin"], stdin: "another good password 1")
        #expect(duplicate.status == 1)
        #expect(duplicate.stderr.contains("already exists"))

        let weak = try await client.run(
            ["register", "--email", "weak@example.com", "--password-stdin"], stdin: "password")
        #expect(weak.status == 1)
        #expect(weak.stderr.contains("registration failed"))

        let badURL = try await client.run(["token", "--broker", "ftp://example.com"])
        #expect(badURL.status == 64)
        #expect(badURL.stderr.contains("--broker"))

        let providers = try await client.run(["providers"])
        #expect(providers.status == 0)
        #expect(providers.stdout.contains("custom"))
        let providersJSON = try await client.run(["providers", "--json"])
        #expect(JSONValue.parse(Array(providersJSON.stdout.utf8))?["providers"]?.arrayValue?.count == 1)

        // Nothing answers on port 1.
        let offline = try await client.run(["providers"], environment: ["BROKER_URL": "http://127.0.0.1:1"])
        #expect(offline.status == 1)
        #expect(offline.stderr.contains("cannot reach the broker"))
    }

    @Test func tokenRefreshesOnceWhenTooShortAndKeepsTheRotation() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)
        try await client.register("lin@example.com")
        let before = try #require(try client.cached())

        // A cached token that meets --min-valid is printed as it is, without the network.
        let cachedOnly = try await client.run(
            ["token", "--min-valid", "60"], environment: ["BROKER_URL": server.url])
        #expect(cachedOnly.stdout == before.accessToken.exposed + "\n")
        #expect(refreshRequests(server) == 0)

        // A brand-new token is not refreshed even for a --min-valid it cannot meet: a refresh would not
        // make it last longer.
        let fresh = try await client.run(["token", "--min-valid", "7200"])
        #expect(fresh.stdout == before.accessToken.exposed + "\n")
        #expect(refreshRequests(server) == 0)

        // Ten minutes on, 3600 s tokens cannot meet 7200: one refresh, printed even so.
        try client.ageSession()
        let refreshed = try await client.run(["token", "--min-valid", "7200"])
        #expect(refreshed.status == 0, "\(refreshed.stderr)")
        let after = try #require(try client.cached())
        #expect(refreshed.stdout == after.accessToken.exposed + "\n")
        #expect(after.accessToken != before.accessToken)
        #expect(after.refreshToken != before.refreshToken, "the rotated refresh token is stored")
        #expect(refreshRequests(server) == 1)
        // The spent one is dead at the broker.
        let replay = try await server.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", before.refreshToken!.exposed)])
        #expect(replay.status == 400)
    }

    @Test func theLauncherAnswersAWarmTokenAloneAndHandsEverythingElseOn() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)
        try await client.register("ada@example.com")
        let token = try #require(try client.cached()).accessToken.exposed
        let fullPath = BrokerProcess.binary + "-full"

        // With broker-full out of reach, the warm answers still come (they are the launcher's own) …
        let alone = ["BROKER_FULL": "/nonexistent/broker-full"]
        for (arguments, expected) in [
            (["token"], token), (["token", "--format", "header"], "Authorization: Bearer \(token)"),
            (["token", "--format=raw", "--min-valid=30", "--profile", "default"], token),
            (["token", "--broker", client.url + "/"], token),
        ] {
            let result = try await client.run(arguments, environment: alone)
            #expect(result.status == 0 && result.stdout == expected + "\n", "\(arguments): \(result.stderr)")
            // … and say the same as the full CLI.
            let full = try await CLI.run(arguments, environment: client.environment, executable: fullPath)
            #expect(full.stdout == result.stdout, "\(arguments)")
        }
        // … and everything else is broker-full's, named when it is missing.
        for arguments in [["whoami"], ["token", "--format", "json"], ["token", "--help"], ["--version"]] {
            let result = try await client.run(arguments, environment: alone)
            #expect(result.status == 1 && result.stderr.contains("cannot run /nonexistent/broker-full"))
            #expect(result.stdout.isEmpty)
        }
        // A token that needs a refresh goes to broker-full, which refreshes it.
        try client.ageSession()
        let needsRefresh = try await client.run(["token", "--min-valid", "7200"], environment: alone)
        #expect(needsRefresh.status == 1, "the launcher does not refresh")
        let refreshed = try await client.run(["token", "--min-valid", "7200"])
        #expect(refreshed.status == 0 && refreshed.stdout != token + "\n", "\(refreshed.stderr)")
        // A store that does not read cleanly is left for broker-full to report (and move aside).
        try Data("{not json".utf8).write(to: URL(fileURLWithPath: client.credentials))
        let corrupt = try await client.run(["token"], environment: alone)
        #expect(corrupt.status == 1 && FileManager.default.fileExists(atPath: client.credentials), "untouched")
    }

    @Test func twentyConcurrentTokensMakeOneRefresh() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)
        try await client.register("many@example.com")
        try client.ageSession()
        let before = try #require(try client.cached())

        let results = try await withThrowingTaskGroup(of: CLI.Result.self) { group in
            for _ in 0..<20 {
                group.addTask { try await client.run(["token", "--min-valid", "7200"]) }
            }
            var all = [CLI.Result]()
            for try await result in group { all.append(result) }
            return all
        }
        for result in results { #expect(result.status == 0, "\(result.stderr)") }
        let tokens = Set(results.map(\.stdout))
        #expect(tokens.count == 1, "every process printed the one refreshed token")
        #expect(refreshRequests(server) == 1, "single-flight: exactly one refresh request")
        let after = try #require(try client.cached())
        #expect(tokens.first == after.accessToken.exposed + "\n")
        #expect(after.accessToken != before.accessToken)
        #expect(try await server.me(after.accessToken.exposed, heldBy: client).status == 200)
    }

    @Test func aSessionTheBrokerRefusesIsClearedNotRetried() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)
        try await client.register("gone@example.com")
        let session = try #require(try client.cached())

        // Revoked at the broker behind the client's back.
        let revoked = try await server.form("/auth/revoke", [("token", session.refreshToken!.exposed)])
        #expect(revoked.status == 200)

        // whoami asks the broker: 401 to the access token → the session is removed, exit 4.
        let who = try await client.run(["whoami"])
        #expect(who.status == 4)
        #expect(who.stderr.contains("no longer accepts"))
        #expect(who.stderr.contains("run: broker login"))
        #expect(try client.cached() == nil)

        // A refused refresh: the same.
        try await client.register("gone2@example.com")
        let second = try #require(try client.cached())
        _ = try await server.form("/auth/revoke", [("token", second.refreshToken!.exposed)])
        try client.ageSession()
        let token = try await client.run(["token", "--min-valid", "7200"])
        #expect(token.status == 4)
        #expect(token.stdout.isEmpty)
        #expect(token.stderr.contains("no longer accepts"))
        #expect(try client.cached() == nil)
        let again = try await client.run(["token", "--min-valid", "7200"])
        #expect(again.status == 4)
        #expect(again.stderr.contains("not signed in"))
        #expect(refreshRequests(server) == 1, "a refused session is not retried")
    }

    @Test func aCorruptOrForeignStoreIsMovedAsideAndReported() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        for (content, reason) in [
            ("{\"format\": 1, \"sessions\": [", "not JSON"),
            ("{\"format\": 2, \"sessions\": []}", "format 2"),
            ("{\"format\": 1, \"sessions\": [{\"broker\": 5}]}", "session 1 is malformed"),
            ("\u{0}\u{1}binary", "not JSON"),
        ] {
            let client = try ClientHome(server: server)
            try FileManager.default.createDirectory(atPath: client.home, withIntermediateDirectories: true)
            try Data(content.utf8).write(to: URL(fileURLWithPath: client.credentials))
            let result = try await client.run(["token"])
            #expect(result.status == 4, "\(result.stderr)")
            #expect(result.stdout.isEmpty)
            #expect(result.stderr.contains(client.credentials))
            #expect(result.stderr.contains(reason), "\(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: client.credentials))
            let aside = try FileManager.default.contentsOfDirectory(atPath: client.home)
                .filter { $0.hasPrefix("credentials.json.corrupt-") }
            #expect(aside.count == 1)
            let kept = try String(contentsOfFile: client.home + "/" + aside[0], encoding: .utf8)
            #expect(kept == content, "the bad file is kept, not overwritten")
            #expect(result.stderr.contains(aside[0]))
            // A sign-in starts a fresh store.
            try await client.register("fresh-\(UUID().uuidString.prefix(8))@example.com")
            #expect(try client.cached() != nil)
        }
    }

    @Test func clientConfigFileSetsTheBrokerAndBadOnesAreNamed() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)
        try FileManager.default.createDirectory(atPath: client.home, withIntermediateDirectories: true)
        let config = client.home + "/config.json"
        try Data(#"{"broker_url": "\#(server.url)/"}"#.utf8).write(to: URL(fileURLWithPath: config))
        let listed = try await client.run(["providers"], environment: ["BROKER_URL": ""])
        #expect(listed.status == 0, "\(listed.stderr)")

        for (text, expected) in [
            (#"{"broker_url": 5}"#, "\"broker_url\" must be a string"),
            (#"{"brokr_url": "http://x"}"#, "unknown key \"brokr_url\""),
            (#"{"broker_url": "#, "not valid JSON"),
        ] {
            try Data(text.utf8).write(to: URL(fileURLWithPath: config))
            let result = try await client.run(["providers"], environment: ["BROKER_URL": ""])
            #expect(result.status == 1)
            #expect(result.stderr.contains(config), "\(result.stderr)")
            #expect(result.stderr.contains(expected), "\(result.stderr)")
            #expect(try String(contentsOfFile: config, encoding: .utf8) == text, "nothing rewritten")
        }
    }

    @Test func httpTimeoutBoundsEachAnswerAndBadOnesAreNamed() async throws {
        // A broker that takes connections and never answers: a listening socket nobody accepts on (the kernel
        // completes the handshakes), so only the client's own timeout can end a request.
        let silent = try SilentListener()
        let client = try ClientHome(url: "http://127.0.0.1:\(silent.port)")
        try FileManager.default.createDirectory(atPath: client.home, withIntermediateDirectories: true)
        let config = client.home + "/config.json"

        let fromEnvironment = try await client.run(["providers"], environment: ["BROKER_HTTP_TIMEOUT": "1"])
        #expect(fromEnvironment.status == 1, "\(fromEnvironment.stderr)")
        #expect(fromEnvironment.stderr.contains("the wait for an answer was 1 s"), "\(fromEnvironment.stderr)")

        try Data(#"{"http_timeout": 2, "profiles": {"slow": {"http_timeout": 1}}}"#.utf8).write(
            to: URL(fileURLWithPath: config))
        let fromFile = try await client.run(["providers"])
        #expect(fromFile.status == 1 && fromFile.stderr.contains("was 2 s"), "\(fromFile.stderr)")
        let fromProfile = try await client.run(["providers", "--profile", "slow"])
        #expect(fromProfile.status == 1 && fromProfile.stderr.contains("was 1 s"), "\(fromProfile.stderr)")
        let overFile = try await client.run(["providers"], environment: ["BROKER_HTTP_TIMEOUT": "1"])
        #expect(overFile.status == 1 && overFile.stderr.contains("was 1 s"), "the variable over the file")

        for value in ["0", "3601", "1.5", "ten", "-1", "99999999999999999999"] {
            let result = try await client.run(["providers"], environment: ["BROKER_HTTP_TIMEOUT": value])
            #expect(result.status == 64, "\(value): \(result.stderr)")
            #expect(result.stderr.contains("BROKER_HTTP_TIMEOUT") && result.stderr.contains("1 to 3600"))
        }
        for (text, key) in [
            (#"{"http_timeout": "30"}"#, "\"http_timeout\""), (#"{"http_timeout": 0}"#, "\"http_timeout\""),
            (#"{"http_timeout": 2.5}"#, "\"http_timeout\""),
            (#"{"profiles": {"x": {"http_timeout": 4000}}}"#, "\"profiles.x.http_timeout\""),
        ] {
            try Data(text.utf8).write(to: URL(fileURLWithPath: config))
            let result = try await client.run(["providers"])
            #expect(result.status == 1, "\(text): \(result.stderr)")
            #expect(result.stderr.contains(config) && result.stderr.contains(key), "\(result.stderr)")
            #expect(result.stderr.contains("whole number of seconds from 1 to 3600"), "\(result.stderr)")
            #expect(try String(contentsOfFile: config, encoding: .utf8) == text, "nothing rewritten")
        }
    }

    @Test func profilesAreSeparateAndLogoutAllClearsEvery() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)
        try await client.register("one@example.com")
        let work = try await client.run(
            ["register", "--profile", "work", "--email", "two@example.com", "--password-stdin"],
            stdin: "correct horse battery staple")
        #expect(work.status == 0, "\(work.stderr)")
        let one = try await client.run(["whoami", "--json"])
        let two = try await client.run(["whoami", "--json"], environment: ["BROKER_PROFILE": "work"])
        #expect(JSONValue.parse(Array(one.stdout.utf8))?["email"]?.stringValue == "one@example.com")
        #expect(JSONValue.parse(Array(two.stdout.utf8))?["email"]?.stringValue == "two@example.com")
        #expect(JSONValue.parse(Array(two.stdout.utf8))?["profile"]?.stringValue == "work")

        let all = try await client.run(["logout", "--all"])
        #expect(all.status == 0)
        #expect(try FileTokenCache(directory: client.home).sessions().isEmpty)
        #expect(try await client.run(["token", "--profile", "work"]).status == 4)
    }
}

@Suite("the credential store survives writers killed at random moments")
struct CredentialStoreCrashTests {
    static var writer: String {
        TestPaths.built("broker-cache-writer")
    }

    @Test func killNineAHundredTimes() async throws {
        let home = try BrokerProcess.temporaryDirectory().appendingPathComponent("home").path
        try FileManager.default.createDirectory(
            atPath: home, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let cache = FileTokenCache(directory: home)
        let distinct = try await offThread {
            var contents = Set<String>()
            for _ in 0..<120 {
                let process = try ChildProcess(Self.writer, [home], stdout: .null)
                // Wait until this writer has replaced the file at least once (its content is its own), so
                // that the kill below lands while it is writing, not while it is still starting up.
                let previous = try? String(contentsOfFile: home + "/credentials.json", encoding: .utf8)
                let deadline = Date().addingTimeInterval(30)
                while (try? String(contentsOfFile: home + "/credentials.json", encoding: .utf8)) == previous,
                    Date() < deadline
                {
                    usleep(500)
                }
                usleep(UInt32.random(in: 0...20_000))
                process.send(SIGKILL)
                #expect(process.waitUntilExit()?.signaled == true, "the writer was killed, not finished")
                // The file always parses: the old content or the new, never a mix.
                let sessions = try cache.sessions()
                #expect(!sessions.isEmpty)
                contents.insert(try String(contentsOfFile: home + "/credentials.json", encoding: .utf8))
                #expect(
                    try FileManager.default.contentsOfDirectory(atPath: home)
                        .allSatisfy { !$0.contains("corrupt") })
            }
            return contents.count
        }
        #expect(distinct > 20, "the writers wrote between kills (\(distinct) distinct files seen)")
        // Orphaned temporary files are swept by the next writer.
        try cache.locked().unlock()
        let left = try FileManager.default.contentsOfDirectory(atPath: home).filter { $0.contains(".tmp-") }
        #expect(left.isEmpty, "\(left)")
    }
}

@Suite("the broker CLI on a pseudo-terminal")
struct CLITerminalTests {
    @Test func promptsWithoutEchoAndColourOnlyWithoutNoColor() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let script = BrokerProcess.repositoryRoot.appendingPathComponent("Tests/Interop/pty_prompt.py").path
        let result = try await offThread {
            let process = try ChildProcess(
                "python3", [script, BrokerProcess.binary, client.url, client.home], stdout: .pipe,
                stderr: .standardOutput)
            let output = process.readOutputToEnd()
            return (process.waitUntilExit()?.status ?? -1, String(decoding: output, as: UTF8.self))
        }
        #expect(result.0 == 0, "\(result.1)")
        // What the terminal session left behind: two profiles signed in, no password anywhere.
        #expect(try client.cached()?.provider == .custom)
        #expect(!client.fileText().contains("pty typed secret"))
    }
}

@Suite("the CLI and plain http")
struct PlainHTTPTests {
    @Test(
        "passwords and tokens never go over plain http to another machine without an explicit opt-in",
        .bug(id: 18, "finding 12: the CLI sent passwords and refresh tokens over plain http without a word"))
    func plainHTTPToAnotherMachineIsRefused() async throws {
        let home = try BrokerProcess.temporaryDirectory().appendingPathComponent("home").path
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        let base = ["BROKER_HOME": home, "BROKER_PROFILE": "", "NO_COLOR": "1"]
        // From a flag or the environment: a usage error, before anything is sent.
        let flag = try await CLI.run(["token", "--broker", "http://broker.example.com"], environment: base)
        #expect(flag.status == 64 && flag.stderr.contains("plain http"), "\(flag.stderr)")
        let env = try await CLI.run(
            ["register", "--email", "a@example.com", "--password-stdin"],
            environment: base.merging(["BROKER_URL": "http://broker.example.com:8787"]) { $1 }, stdin: "secret pw")
        #expect(env.status == 64 && env.stderr.contains("plain http"), "\(env.stderr)")
        // Loopback stays allowed (http://127.0.0.2 is this machine too): "not signed in" means it got that far.
        for url in ["http://127.0.0.2:1", "http://localhost:1", "http://[::1]:1"] {
            let local = try await CLI.run(["token", "--broker", url], environment: base)
            #expect(local.status == 4, "\(url): \(local.stderr)")
        }
        // From the config file: an error naming the file; with the opt-in, accepted.
        try Data(#"{"broker_url": "http://broker.example.com"}"#.utf8).write(
            to: URL(fileURLWithPath: home + "/config.json"))
        let configured = try await CLI.run(["token"], environment: base)
        #expect(configured.status == 1 && configured.stderr.contains("config.json"), "\(configured.stderr)")
        try Data(#"{"broker_url": "http://broker.example.com", "insecure_http": true}"#.utf8).write(
            to: URL(fileURLWithPath: home + "/config.json"))
        let optedIn = try await CLI.run(["token"], environment: base)
        #expect(optedIn.status == 4 && optedIn.stderr.contains("not signed in"), "\(optedIn.stderr)")
        let https = try await CLI.run(["token", "--broker", "https://broker.example.com"], environment: base)
        #expect(https.status == 4, "\(https.stderr)")
    }
}

@Suite("client-side pieces")
struct ClientPieceTests {
    @Test func rfc3339MatchesFoundation() throws {
        let formatter = ISO8601DateFormatter()
        for seconds: Int64 in [0, 1, 59, 86_399, 86_400, 951_782_400, 1_795_412_345, 4_102_444_800, 253_402_300_799] {
            let expected = formatter.string(from: Date(timeIntervalSince1970: TimeInterval(seconds)))
            #expect(RFC3339.format(epochSeconds: seconds) == expected)
        }
    }

    @Test func brandNewTokensAreNotRefreshedAgain() {
        let key = SessionKey(brokerURL: "http://127.0.0.1:8787", profile: "default")
        let session = Session(
            key: key, userID: UserID(provider: .custom, subject: "x"), provider: .custom,
            accessToken: Secret("a"), expiresAt: 1000 + 3600, refreshToken: Secret("r"), obtainedAt: 1000)
        #expect(session.satisfies(minValid: 60, at: 1000))
        #expect(session.satisfies(minValid: 7200, at: 1000), "brand new: a refresh would add nothing")
        #expect(session.satisfies(minValid: 7200, at: 1359))
        #expect(!session.satisfies(minValid: 7200, at: 1360), "a tenth of its lifetime old")
        #expect(session.satisfies(minValid: 60, at: 4539))
        #expect(!session.satisfies(minValid: 60, at: 4541))
        #expect(!session.satisfies(minValid: 0, at: 4600), "expired")
        var legacy = session
        legacy.obtainedAt = nil
        #expect(!legacy.satisfies(minValid: 7200, at: 1000))
    }

    @Test func brokerURLsAreNormalizedOrRefused() {
        #expect(ClientSettings.normalize("HTTPS://Broker.Example.com/") == "https://broker.example.com")
        #expect(ClientSettings.normalize(" http://127.0.0.1:8787/base// ") == "http://127.0.0.1:8787/base")
        for bad in ["ftp://x", "http://", "127.0.0.1:8787", "http://user@host", "http://h/?q", "http://:80"] {
            #expect(ClientSettings.normalize(bad) == nil, "\(bad)")
        }
    }
}
