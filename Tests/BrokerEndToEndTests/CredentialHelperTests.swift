import BrokerCore
import BrokerCredentials
import BrokerServer
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// A folder with the helper names linked to `broker`, as scripts/install.sh links them.
/// A bare repository `repo.git` with one commit (README) under `gitRoot`, for the resource server's git http-backend,
/// and real git run quietly in a home of its own.
struct ServedRepository: Sendable {
    let root: URL
    var gitRoot: String { root.appendingPathComponent("served").path }

    static func make() async throws -> ServedRepository {
        let repository = ServedRepository(root: try TemporaryDirectory.make(prefix: "broker-git"))
        let work = repository.root.appendingPathComponent("work").path
        try FileManager.default.createDirectory(atPath: repository.gitRoot, withIntermediateDirectories: true)
        #expect(try await repository.git(["init", "-q", "-b", "main", work]).status == 0)
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: work + "/README"))
        #expect(try await repository.git(["-C", work, "add", "README"]).status == 0)
        #expect(try await repository.git(["-C", work, "commit", "-q", "-m", "first"]).status == 0)
        #expect(
            try await repository.git(["clone", "-q", "--bare", work, repository.gitRoot + "/repo.git"]).status == 0)
        return repository
    }

    @Sendable func git(_ arguments: [String], _ environment: [String: String] = [:]) async throws -> ProcessOutput {
        let quiet = [
            "GIT_CONFIG_NOSYSTEM": "1", "HOME": root.path, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_TERMINAL_PROMPT": "0",
        ]
        return try await ProcessRunner.run(
            "/usr/bin/git", arguments, environment: quiet.merging(environment) { $1 }, timeout: .seconds(120))
    }
}

struct HelperLinks {
    let bin: String

    init() throws {
        bin = try TemporaryDirectory.make(prefix: "broker-helpers").appendingPathComponent("bin").path
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        for name in ["git-credential-broker", "docker-credential-broker"] {
            try FileManager.default.createSymbolicLink(
                atPath: bin + "/" + name, withDestinationPath: BrokerProcess.binary)
        }
    }

    var path: String { bin + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin") }
}

@Suite("credential helpers: git and docker get the session's token for the URLs in api_urls")
struct CredentialHelperTests {
    /// Real git over smart HTTP (git http-backend behind the resource server, which takes a broker token as the
    /// Basic password): clone; a token the server no longer accepts → 401 → git's erase → the next fetch
    /// refreshes; a revoked session → git stops with the helper's message and nothing stays cached.
    @Test func gitClonesAndFetchesWithTheBrokersToken() async throws {
        let served = try await ServedRepository.make()
        let root = served.root
        let gitRoot = served.gitRoot
        let git = served.git

        let links = try HelperLinks()
        try await RequestWorld.run(gitRoot: gitRoot) { world in
            try await world.client.register("git@example.com")
            try world.writeConfig(#"{"api_urls": ["\#(world.api.base)/git"]}"#)
            let environment = world.client.environment.merging(["PATH": links.path]) { $1 }
            let helper = ["-c", "credential.\(world.api.base).helper=broker"]
            let clone = root.appendingPathComponent("clone").path

            let cloned = try await git(helper + ["clone", "-q", world.api.base + "/git/repo.git", clone], environment)
            #expect(cloned.status == 0, "\(cloned.stderr)")
            #expect(FileManager.default.fileExists(atPath: clone + "/README"))
            let token = try #require(try world.client.cached()?.accessToken)
            #expect(try await world.api.log().contains { $0.status == 200 && $0.path.hasPrefix("/git/") })

            // The token expires where it is judged while this machine still believes in it: the server
            // answers 401 and git erases it (git 2.39 then gives up on this command, as git does).
            try await world.advance(by: 7200)
            let refused = try await git(helper + ["-C", clone, "fetch", "-q"], environment)
            #expect(refused.status != 0)
            let erased = try #require(try world.client.cached())
            #expect(erased.accessToken == token)
            #expect(erased.expiresAt <= Int64(Date().timeIntervalSince1970), "erase spent the cached token")
            #expect(erased.refreshToken != nil, "and kept the session")
            #expect(try await world.refreshes() == 0)

            // git asks again on its next command: a refreshed token, and the fetch goes through.
            let fetched = try await git(helper + ["-C", clone, "fetch", "-q"], environment)
            #expect(fetched.status == 0, "\(fetched.stderr)")
            #expect(try await world.refreshes() == 1)
            #expect(try world.client.cached()?.accessToken != token)

            // Revoked at the broker: refused, erased, and then the helper says the session ended.
            try await world.revokeSession()
            #expect(try await git(helper + ["-C", clone, "fetch", "-q"], environment).status != 0)
            let ended = try await git(helper + ["-C", clone, "fetch", "-q"], environment)
            #expect(ended.status != 0)
            #expect(ended.stderr.contains("no longer accepts the session"), "\(ended.stderr)")
            #expect(ended.stderr.contains("broker login"), "\(ended.stderr)")
            #expect(try world.client.cached() == nil, "nothing is left cached")
        }
    }

    @Test func theGitProtocolAnswersOnlyListedHosts() async throws {
        let links = try HelperLinks()
        try await RequestWorld.run { world in
            let helper = links.bin + "/git-credential-broker"
            func run(_ arguments: [String], _ input: String) async throws -> ProcessOutput {
                try await ProcessRunner.run(
                    helper, arguments, stdin: Array(input.utf8), environment: world.client.environment)
            }
            let fields = "protocol=https\nhost=git.example.com\npath=team/repo.git\n"
            let listed = fields + "\n"
            // Signed out: git is told to stop, the person what to do.
            try world.writeConfig(#"{"api_urls": ["https://git.example.com/team"]}"#)
            let signedOut = try await run(["get"], listed)
            #expect(signedOut.status == 4)
            #expect(signedOut.stdout == "quit=1\n")
            #expect(signedOut.stderr.contains("broker login"), "\(signedOut.stderr)")

            try await world.client.register("protocol@example.com")
            let token = try #require(try world.client.cached()?.accessToken.exposed)
            let answered = try await run(["get"], listed)
            #expect(answered.status == 0, "\(answered.stderr)")
            let answer = CredentialHelper.gitFields(answered.stdout)
            #expect(answer["username"] == "broker")
            #expect(answer["password"] == token)
            #expect(answer["password_expiry_utc"].flatMap { Int64($0) } != nil)
            // The warm answer comes from the launcher alone.
            let warm = try await ProcessRunner.run(
                helper, ["get"], stdin: Array(listed.utf8),
                environment: world.client.environment.merging(["BROKER_FULL": "/nonexistent"]) { $1 })
            #expect(warm.stdout == answered.stdout)
            // Host only (no credential.useHttpPath): the listed origin.
            #expect(try await run(["get"], "protocol=https\nhost=git.example.com\n").stdout.contains(token))
            #expect(try await run(["--username", "ci-bot", "get"], listed).stdout.hasPrefix("username=ci-bot\n"))

            for unlisted in [
                "protocol=https\nhost=git.example.com\npath=other/repo.git\n",
                "protocol=https\nhost=evil.example.com\n",
                "protocol=http\nhost=git.example.com\n",
                "protocol=https\nhost=git.example.com:8443\n",
                "protocol=https\nhost=git.example.com\npath=team/../other/repo.git\n",
                "garbage without equals\n",
                "",
            ] {
                let result = try await run(["get"], unlisted)
                #expect(result.status == 0, "\(unlisted)")
                #expect(result.stdout.isEmpty, "\(unlisted): \(result.stdout)")
            }
            #expect(try await run(["--username", "a:b", "get"], listed).status == 64)
            #expect(try await run(["list"], listed).status == 64)
            #expect(try await run(["store"], fields + "username=broker\npassword=x\n").status == 0)

            // erase of another token does not spend the cached one; erase of the cached one does.
            #expect(try await run(["erase"], fields + "password=not-the-token\n\n").status == 0)
            #expect((try world.client.cached()?.expiresAt ?? 0) > Int64(Date().timeIntervalSince1970))
            #expect(try await run(["erase"], fields + "username=broker\npassword=\(token)\n\n").status == 0)
            #expect((try world.client.cached()?.expiresAt ?? .max) <= Int64(Date().timeIntervalSince1970))
            let renewed = CredentialHelper.gitFields(try await run(["get"], listed).stdout)["password"]
            #expect(renewed != nil && renewed != token)
            #expect(try await world.refreshes() == 1)
        }
    }

    /// The docker-credential-helpers protocol exactly as docker drives it: the server URL on stdin, JSON or the
    /// not-found sentence on stdout, the exit status.
    @Test func theDockerProtocol() async throws {
        let links = try HelperLinks()
        try await RequestWorld.run { world in
            let helper = links.bin + "/docker-credential-broker"
            func run(_ action: String, _ input: String) async throws -> ProcessOutput {
                try await ProcessRunner.run(
                    helper, [action], stdin: Array(input.utf8), environment: world.client.environment)
            }
            try world.writeConfig(#"{"api_urls": ["https://registry.example.com"]}"#)
            let signedOut = try await run("get", "registry.example.com\n")
            #expect(signedOut.status == 4)
            #expect(signedOut.stdout.contains("broker login"), "docker shows stdout: \(signedOut.stdout)")

            try await world.client.register("docker@example.com")
            let token = try #require(try world.client.cached()?.accessToken.exposed)
            for server in ["registry.example.com", "https://registry.example.com", "https://registry.example.com/v2/"] {
                let answer = try await run("get", server)
                #expect(answer.status == 0, "\(server): \(answer.stdout)")
                let document = JSONValue.parse(Array(answer.stdout.utf8))
                #expect(document?["ServerURL"]?.stringValue == server)
                #expect(document?["Username"]?.stringValue == "broker")
                #expect(document?["Secret"]?.stringValue == token)
            }
            for server in ["other.example.com", "http://registry.example.com", "registry.example.com:5000", ""] {
                let missing = try await run("get", server)
                #expect(missing.status == 1, "\(server)")
                #expect(missing.stdout == "credentials not found in native keychain\n", "\(server): \(missing.stdout)")
            }
            let listed = try await run("list", "")
            #expect(listed.status == 0)
            #expect(JSONValue.parse(Array(listed.stdout.utf8)) == ["https://registry.example.com": "broker"])

            let stored = try await run(
                "store", #"{"ServerURL": "registry.example.com", "Username": "u", "Secret": "s"}"#)
            #expect(stored.status == 1)
            #expect(stored.stdout.contains("broker login"))
            #expect(try world.client.cached()?.accessToken.exposed == token, "store changed nothing")

            #expect(try await run("erase", "registry.example.com").status == 0)
            let renewed = JSONValue.parse(Array(try await run("get", "registry.example.com").stdout.utf8))
            #expect(renewed?["Secret"]?.stringValue != token)
            #expect(try await world.refreshes() == 1)
        }
    }
}

@Suite("scripts/install.sh")
struct InstallTests {
    /// scripts/test.sh installs twice into a temporary prefix, as users do (release), beside the fuzzing, names it
    /// in BROKER_TEST_INSTALL_PREFIX and runs this on its own; it checks what is there, runs it, and uninstalls it.
    @Test func theInstalledTreeRunsAndUninstallRemovesIt() async throws {
        guard let prefix = ProcessInfo.processInfo.environment["BROKER_TEST_INSTALL_PREFIX"], !prefix.isEmpty else {
            let reason =
                "no installed tree for this test: run it through scripts/test.sh, or after "
                + "scripts/install.sh --prefix DIR with BROKER_TEST_INSTALL_PREFIX=DIR"
            Issue.record(Comment(rawValue: reason))
            return
        }
        let script = BrokerProcess.repositoryRoot.appendingPathComponent("scripts/install.sh").path
        let files = [
            "bin/broker", "bin/broker-full", "bin/git-credential-broker", "bin/docker-credential-broker",
            "share/bash-completion/completions/broker", "share/zsh/site-functions/_broker",
            "share/fish/vendor_completions.d/broker.fish", "share/man/man1/broker.1",
        ]
        for file in files { #expect(FileManager.default.fileExists(atPath: prefix + "/" + file), "\(file)") }
        #expect(
            try FileManager.default.destinationOfSymbolicLink(atPath: prefix + "/bin/git-credential-broker") == "broker"
        )

        let version = try await ProcessRunner.run(prefix + "/bin/broker", ["--version"])
        #expect(version.status == 0)
        #expect(version.stdout.contains("0."), "\(version.stdout)")
        let help = try await ProcessRunner.run(prefix + "/bin/git-credential-broker", ["--help"])
        #expect(help.stdout.contains("credential git"), "the link runs the git helper: \(help.stdout)")
        let docker = try await ProcessRunner.run(prefix + "/bin/docker-credential-broker", ["--help"])
        #expect(docker.stdout.contains("credential docker"), "\(docker.stdout)")
        // The launcher found its sibling broker-full in the prefix, not in the build folder.
        let full = try await ProcessRunner.run(prefix + "/bin/broker", ["request", "--help"])
        #expect(full.stdout.contains("--no-login"), "\(full.stdout)")
        let bash = try await ProcessRunner.run(
            "/bin/bash", ["-n", prefix + "/share/bash-completion/completions/broker"])
        #expect(bash.status == 0, "\(bash.stderr)")
        let completion = try String(
            contentsOfFile: prefix + "/share/bash-completion/completions/broker", encoding: .utf8)
        #expect(completion.contains("request"))
        let manual = try await ProcessRunner.run(
            "/usr/bin/man", ["-l", prefix + "/share/man/man1/broker.1"],
            environment: ["MANPAGER": "cat", "PAGER": "cat"])
        #expect(manual.status == 0, "\(manual.stderr)")
        #expect(manual.stdout.contains("request"), "\(manual.stdout.prefix(500))")

        let removed = try await ProcessRunner.run("/bin/bash", [script, "--prefix", prefix, "--uninstall"])
        #expect(removed.status == 0, "\(removed.stderr)")
        let left = FileManager.default.enumerator(atPath: prefix)?.compactMap { $0 as? String }.filter { path in
            var isDirectory: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: prefix + "/" + path, isDirectory: &isDirectory)
            return !isDirectory.boolValue
        }
        #expect(left == [], "uninstall removed every file it installed")
        let again = try await ProcessRunner.run("/bin/bash", [script, "--prefix", prefix, "--uninstall"])
        #expect(again.status == 1)
        #expect(again.stderr.contains("nothing installed"), "\(again.stderr)")
        let wrong = try await ProcessRunner.run("/bin/bash", [script, "--prefix"])
        #expect(wrong.status == 64)
        let unknown = try await ProcessRunner.run("/bin/bash", [script, "--frobnicate"])
        #expect(unknown.status == 64)
    }
}
