import BrokerClient
import BrokerCore
import BrokerSystem
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// `broker login --device` as a person uses it: the real CLI polls a real broker while headless Chromium
/// (Tests/Interop/device_in_chromium.py) plays the phone — types the code, signs in through `broker emulate`'s
/// Google or with a custom account, and allows or denies. Screenshots of every page land in
/// `$BROKER_SCREENSHOTS` (else the broker's test directory).
@Suite("broker login --device with a browser on another device")
struct DeviceFlowTests {
    static let password = "correct horse battery staple"

    /// A `broker login --device …` process whose stderr is a file.
    final class Login: @unchecked Sendable {
        let process: ChildProcess
        let errors: String

        init(_ client: ClientHome, _ extra: [String] = [], command: [String] = ["login", "--device"]) throws {
            errors = try BrokerProcess.temporaryDirectory().appendingPathComponent("device-err").path
            _ = FileManager.default.createFile(atPath: errors, contents: nil)
            process = try ChildProcess(
                BrokerProcess.binary, command + extra,
                environment: ProcessInfo.processInfo.environment.merging(client.environment) { $1 }, stdin: .null,
                stdout: .null, stderr: .file(errors))
        }

        var stderr: String { (try? String(contentsOfFile: errors, encoding: .utf8)) ?? "" }

        /// The user code, once the CLI has printed its whole preamble (up to "Waiting for the approval"): a
        /// test that read the code as soon as it appeared once missed the line printed after it.
        func userCode() async throws -> String {
            let process = process
            let printed = try await eventually { stderr.contains("Waiting for the approval") || !process.isRunning }
            guard printed, stderr.contains("Waiting for the approval") else {
                throw ServerTestError("broker login --device did not ask for the approval: \(stderr)")
            }
            let lines = stderr.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            guard
                let code = lines.first(where: {
                    $0.range(of: "^[A-Z]{4}-[A-Z]{4}$", options: .regularExpression) != nil
                })
            else { throw ServerTestError("no user code printed: \(stderr)") }
            return code
        }

        /// Waits (off the cooperative pool) for the exit status.
        func finish() async throws -> Int32 {
            let process = process
            return try await offThread { process.waitUntilExit()?.status ?? -1 }
        }

        deinit { process.send(SIGTERM) }
    }

    static func screenshots(_ server: BrokerProcess) throws -> String {
        let shots =
            ProcessInfo.processInfo.environment["BROKER_SCREENSHOTS"]
            ?? server.directory.appendingPathComponent("screenshots").path
        try FileManager.default.createDirectory(atPath: shots, withIntermediateDirectories: true)
        return shots
    }

    static func chromium(_ server: BrokerProcess, code: String, way: String, decision: String, email: String = "")
        async throws -> JSONValue
    {
        let result = try await ProcessRunner.run(
            "/usr/bin/env",
            [
                "python3", TestPaths.interop("device_in_chromium.py"), server.url, code, way, decision,
                try screenshots(server), email,
            ],
            environment: ["DEVICE_PASSWORD": password], timeout: .seconds(180))
        #expect(result.status == 0, "\(result.stderr)")
        return try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout) \(result.stderr)")
    }

    @Test func googleOnAPhoneSignsTheCLIIn() async throws {
        let emulator = try await EmulatorProcess.start()
        let server = try await BrokerProcess.start(config: emulator.googleOnlyConfig)
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let login = try Login(client, ["--provider", "google"])
        let code = try await login.userCode()
        #expect(login.stderr.contains("open \(server.url)/device on any device"))
        #expect(login.stderr.contains("\(server.url)/device?user_code=\(code)"))
        let pages = try await Self.chromium(server, code: code, way: "google", decision: "allow")
        #expect(pages["entry"] == "Sign in on a device")
        #expect(pages["asking"]?.stringValue?.contains("broker CLI on 127.0.0.1") == true)
        #expect(pages["confirm"] == "Allow this device?")
        #expect(pages["confirm_text"]?.stringValue?.contains("alice@example.com") == true)
        #expect(pages["result"] == "You are signed in on the device")
        #expect(try await login.finish() == 0, "\(login.stderr)")
        #expect(login.stderr.contains("Signed in as google:104512345678901234567"))
        let session = try #require(try client.cached())
        #expect(session.userID.description == "google:104512345678901234567")
        #expect(try await server.me(session.accessToken.exposed, heldBy: client).status == 200)
    }

    /// Sign in with Apple on the phone, with Apple's emulator on another site (`localhost`) than the broker
    /// (`127.0.0.1`): its answer is a cross-site form post, which carries no SameSite=Lax cookie — the device
    /// binding among them. The broker relays it to a GET of its own, which carries the cookie, and the binding
    /// holds: the phone that typed the code is the one that may allow.
    @Test func appleOnAPhoneAnswersWithACrossSiteFormPost() async throws {
        let emulator = try await EmulatorProcess.start()
        let otherSite = emulator.url.replacingOccurrences(of: "127.0.0.1", with: "localhost")
        let server = try await BrokerProcess.start(
            config: emulator.brokerConfig.replacingOccurrences(of: emulator.url + "/apple", with: otherSite + "/apple"))
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let login = try Login(client, ["--provider", "apple"])
        let code = try await login.userCode()
        let pages = try await Self.chromium(server, code: code, way: "apple", decision: "allow")
        #expect(pages["confirm"] == "Allow this device?", "\(pages)")
        #expect(pages["confirm_text"]?.stringValue?.contains("ada@example.com") == true, "\(pages)")
        #expect(pages["result"] == "You are signed in on the device")
        #expect(try await login.finish() == 0, "\(login.stderr)")
        #expect(try client.cached()?.userID.description == "apple:001234.5f3c0b5e9a8d4c2e8f1a6b7c9d0e1f2a.1234")
        #expect(server.stderr.contains("http.path=/auth/apple/callback"), "the callback was reached")
    }

    @Test func corpAndGitHubOnAPhone() async throws {
        let emulator = try await EmulatorProcess.start()
        let server = try await BrokerProcess.start(config: emulator.brokerConfig)
        defer { server.stop() }
        for (provider, user) in [("corp", "corp:u-7f3a9c21"), ("github", "github:583231")] {
            let client = try ClientHome(server: server)
            let login = try Login(client, ["--provider", provider])
            let code = try await login.userCode()
            let pages = try await Self.chromium(server, code: code, way: provider, decision: "allow")
            #expect(pages["result"] == "You are signed in on the device", "\(provider): \(pages)")
            #expect(try await login.finish() == 0, "\(provider): \(login.stderr)")
            #expect(try client.cached()?.userID.description == user)
        }
    }

    @Test func linkingGoogleFromAMachineWithoutABrowser() async throws {
        let emulator = try await EmulatorProcess.start()
        let server = try await BrokerProcess.start(config: emulator.googleOnlyConfig)
        defer { server.stop() }
        let ada = try ClientHome(server: server)
        try await ada.register("ada@example.com", password: Self.password)
        let adaID = try #require(try ada.cached()).userID
        let link = try Login(ada, command: ["link", "--provider", "google", "--device"])
        let code = try await link.userCode()
        #expect(link.stderr.contains("To link the account, open \(server.url)/device"), "\(link.stderr)")
        let pages = try await Self.chromium(server, code: code, way: "google", decision: "allow")
        #expect(pages["choice"] == "Link an account")
        #expect(pages["confirm"] == "Link this account?")
        #expect(pages["confirm_text"]?.stringValue?.contains("alice@example.com") == true)
        #expect(pages["confirm_text"]?.stringValue?.contains(adaID.description) == true)
        #expect(pages["result"] == "Linked")
        #expect(try await link.finish() == 0, "\(link.stderr)")
        #expect(link.stderr.contains("Linked the Google account alice@example.com: it now signs in as \(adaID)"))
        #expect(try ada.cached()?.userID == adaID)
        let laptop = try ClientHome(server: server)
        let (signedIn, _) = try await CLIBrowserLoginTests.login(laptop)
        #expect(signedIn.status == 0, "\(signedIn.stderr)")
        #expect(try laptop.cached()?.userID == adaID)
    }

    @Test func aCustomAccountThatDeniesLeavesTheCLIWithExitOne() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        try await ClientHome(server: server).register("ada@example.com", password: Self.password)
        let client = try ClientHome(server: server)
        let login = try Login(client)
        let code = try await login.userCode()
        let pages = try await Self.chromium(
            server, code: code, way: "custom", decision: "deny", email: "ada@example.com")
        #expect(pages["confirm_text"]?.stringValue?.contains("ada@example.com") == true)
        #expect(pages["result"] == "Sign-in denied")
        #expect(try await login.finish() == 1)
        #expect(login.stderr.contains("denied"), "\(login.stderr)")
        #expect(try client.cached() == nil, "nothing stored")
    }

    @Test func anExpiredCodeAndCtrlCEndWithExitOneAndNothingStored() async throws {
        // A code that lives as long as one polling interval: the CLI cannot poll before it expires.
        let server = try await BrokerProcess.start(
            config: #"{"server": {"device_code_ttl": 5, "device_poll_interval": 5}}"#)
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let expired = try Login(client)
        #expect(try await expired.finish() == 1)
        #expect(expired.stderr.contains("expired before anyone approved it"), "\(expired.stderr)")
        #expect(try client.cached() == nil)

        let patient = try await BrokerProcess.start()
        defer { patient.stop() }
        let waiting = try Login(try ClientHome(server: patient))
        _ = try await waiting.userCode()
        waiting.process.send(SIGINT)
        #expect(try await waiting.finish() == 1)
        #expect(waiting.stderr.contains("stopped waiting; nothing was stored"), "\(waiting.stderr)")

        let mixed = try await client.run(["login", "--device", "--email", "a@example.com"])
        #expect(mixed.status == 64)
    }
}
