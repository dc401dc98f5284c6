import BrokerCore
import BrokerHTTP
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// `broker password forgot` and `broker password change` against a real `broker serve` whose mail goes to a
/// real SMTP server, with the audit trail in a file.
@Suite("broker password: forgot and change, as a person runs them")
struct PasswordCommandTests {
    /// When a mail does not come, the wait for it says what the broker did: its mail log lines (a flake of the
    /// test below once ended in a bare timeout). The broker's mail server here refuses connections.
    @Test func aMailThatNeverComesIsExplainedByTheBrokersMailLog() async throws {
        let sink = try await SMTPSink.start()
        let closed = try reserveLoopbackPort()  // bound, never listening: held to the end, so no one else takes it
        defer { closed.release() }
        let server = try await BrokerProcess.start(
            config: #"""
                {"mail": {"url": "smtp://127.0.0.1:\#(closed.port)", "from": "Broker <broker@example.com>",
                          "max_attempts": 1}}
                """#)
        defer { server.stop() }
        let client = try ClientHome(server: server)
        try await client.register("lost@example.com", password: "correct horse battery staple")
        #expect(try await client.run(["password", "forgot", "--email", "lost@example.com"]).status == 0)
        #expect(try await eventually { server.stderr.contains("mail not sent, giving up") })
        do {
            _ = try await sink.messages(timeout: .seconds(1), from: server) { !$0.isEmpty }
            Issue.record("a message came to a sink the broker does not send to")
        } catch {
            let said = "\(error)"
            #expect(said.contains("did not come") && said.contains("mail not sent, giving up"), "\(said)")
            #expect(said.contains("broker.mail=reset"), "\(said)")
        }
    }

    @Test func forgotMailsALinkThePageSetsThePasswordAndChangeEndsTheOtherSessions() async throws {
        let sink = try await SMTPSink.start()
        let directory = try BrokerProcess.temporaryDirectory()
        let auditPath = directory.appendingPathComponent("audit.log").path
        let server = try await BrokerProcess.start(
            config: #"""
                {"server": {"audit_log": "\#(auditPath)"},
                 "mail": {"url": "\#(sink.url)", "from": "Broker <broker@example.com>"}}
                """#, directory: directory)
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let first = "correct horse battery staple"
        let second = "a brand new passphrase 42"
        let third = "and yet another passphrase 7"
        try await client.register("cli@example.com", password: first)

        let forgot = try await client.run(["password", "forgot", "--email", "cli@example.com"])
        #expect(forgot.status == 0, "\(forgot.stderr)")
        #expect(forgot.stderr.contains("on its way"))
        let unknown = try await client.run(["password", "forgot", "--email", "nobody@example.com"])
        #expect(
            unknown.status == 0 && unknown.stderr == forgot.stderr.replacingOccurrences(of: "cli@", with: "nobody@"))

        // The link from the mail, then the page, as a browser would.
        _ = try await sink.messages(from: server) { $0.contains { $0["subject"] == "Reset your password" } }
        let token = try sink.mailedToken(
            to: "cli@example.com", subject: "Reset your password", path: "/auth/password/reset")
        let link = try #require(token.map { server.url + "/auth/password/reset?token=" + $0 })
        // A bound for what hangs, as BrokerProcess's own requests have: the reset hashes with the broker's real
        // scrypt on cores the whole suite shares.
        var open = HTTPClientRequest(url: link)
        open.timeout = .seconds(180)
        let page = try await HTTPClient.shared.send(open)
        #expect(page.status == 200)
        let cookie = try #require(page.header("Set-Cookie")?.split(separator: ";").first.map(String.init))
        let html = page.bodyText
        let csrf = try #require(
            html.range(of: #"name="csrf" value=""#).map { String(html[$0.upperBound...].prefix { $0 != "\"" }) })
        var post = HTTPClientRequest.form(
            url: server.url + "/auth/password/reset",
            fields: [("token", try #require(token)), ("csrf", csrf), ("password", second), ("password_again", second)])
        post.headers.append((name: "Cookie", value: cookie))
        post.timeout = .seconds(180)
        let done = try await HTTPClient.shared.send(post)
        #expect(done.status == 200, "\(done.bodyText)")

        // The CLI's session from before the reset ended; signing in takes the new password.
        try client.ageSession()
        #expect(try await client.run(["token", "--min-valid", "999999"]).status == 4)
        let login = try await client.run(
            ["login", "--provider", "custom", "--email", "cli@example.com", "--password-stdin"], stdin: second)
        #expect(login.status == 0, "\(login.stderr)")
        let elsewhere = try ClientHome(server: server)
        #expect(
            try await elsewhere.run(
                ["login", "--provider", "custom", "--email", "cli@example.com", "--password-stdin"], stdin: second
            ).status == 0)

        // change: wrong current password, then right; the other client's session ends, this one stays.
        let wrong = try await client.run(["password", "change", "--password-stdin"], stdin: "nope\n\(third)\n")
        #expect(wrong.status == 1)
        #expect(wrong.stderr.contains("current password is wrong"), "\(wrong.stderr)")
        let oneLine = try await client.run(["password", "change", "--password-stdin"], stdin: second)
        #expect(oneLine.status == 64)
        let changed = try await client.run(["password", "change", "--password-stdin"], stdin: "\(second)\n\(third)\n")
        #expect(changed.status == 0, "\(changed.stderr)")
        try client.ageSession()
        try elsewhere.ageSession()
        #expect(try await client.run(["token", "--min-valid", "999999"]).status == 0, "this session stays")
        #expect(try await elsewhere.run(["token", "--min-valid", "999999"]).status == 4, "the other one ended")
        let noTerminal = try await client.run(["password", "change"])
        #expect(noTerminal.status == 64)

        let events = try String(contentsOfFile: auditPath, encoding: .utf8).split(separator: "\n").compactMap {
            JSONValue.parse(Array($0.utf8))?["event"]?.stringValue
        }
        for event in ["password_reset_requested", "password_reset", "password_changed"] {
            #expect(events.contains(event), "\(event) in \(events)")
        }
        let requested = try String(contentsOfFile: auditPath, encoding: .utf8).split(separator: "\n").compactMap {
            JSONValue.parse(Array($0.utf8))
        }.first { $0["event"] == "password_reset_requested" }
        #expect(
            requested?["client_address"]?.stringValue == "127.0.0.1" && requested?["request_id"] != nil,
            "recorded in the background, still with the request's origin: \(String(describing: requested))")
        let audit = try String(contentsOfFile: auditPath, encoding: .utf8)
        #expect(!audit.contains(try #require(token)), "the link's secret is in no audit event")
        #expect(!server.stderr.contains(try #require(token)), "nor in the log")
        #expect(server.stderr.contains("mail sent"))
    }

    /// A real headless Chromium follows the mailed link and fills the page (Selenium, Debian's chromium-driver):
    /// passwords that differ are refused on the page, the right ones set the password. Screenshots at a phone's
    /// and a desktop's width go to $BROKER_SCREENSHOTS (default: the test's folder).
    @Test func chromiumFollowsTheMailedLinkAndSetsTheNewPassword() async throws {
        let sink = try await SMTPSink.start()
        let server = try await BrokerProcess.start(
            config: #"{"mail": {"url": "\#(sink.url)", "from": "Broker <broker@example.com>"}}"#)
        defer { server.stop() }
        let client = try ClientHome(server: server)
        try await client.register("chromium@example.com")
        #expect(try await client.run(["password", "forgot", "--email", "chromium@example.com"]).status == 0)
        _ = try await sink.messages(from: server) { $0.contains { $0["subject"] == "Reset your password" } }
        let token = try sink.mailedToken(
            to: "chromium@example.com", subject: "Reset your password", path: "/auth/password/reset")
        let link = server.url + "/auth/password/reset?token=" + (try #require(token))
        let shots =
            ProcessInfo.processInfo.environment["BROKER_SCREENSHOTS"]
            ?? server.directory.appendingPathComponent("screenshots").path
        try FileManager.default.createDirectory(atPath: shots, withIntermediateDirectories: true)
        let fresh = "chosen in chromium 2026"
        let result = try await ProcessRunner.run(
            "/usr/bin/env",
            ["python3", TestPaths.interop("mail_link_in_chromium.py"), "reset", link, shots, "NEW_PASSWORD"],
            environment: ["NEW_PASSWORD": fresh], timeout: .seconds(180))
        #expect(result.status == 0, "\(result.stderr)")
        let page = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout) \(result.stderr)")
        #expect(page["form_title"]?.stringValue == "Choose a new password")
        #expect(page["mismatch_problem"]?.stringValue == "The two passwords are not the same.")
        #expect(page["result_title"]?.stringValue == "Your password was changed")
        let login = try await client.run(
            ["login", "--provider", "custom", "--email", "chromium@example.com", "--password-stdin"], stdin: fresh)
        #expect(login.status == 0, "\(login.stderr)")
        for name in ["reset-form", "reset-mismatch", "reset-done"] {
            #expect(FileManager.default.fileExists(atPath: shots + "/\(name)-phone.png"))
        }
    }

    /// With `require_verified_email`: `broker register` says to confirm the address, `broker login` is refused
    /// until then, `broker register --resend` mails a new link, and Chromium presses the page's button.
    @Test func aRequiredConfirmationAsAPersonMeetsIt() async throws {
        let sink = try await SMTPSink.start()
        let server = try await BrokerProcess.start(
            config: #"""
                {"server": {"require_verified_email": true},
                 "mail": {"url": "\#(sink.url)", "from": "Broker <broker@example.com>"}}
                """#)
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let password = "correct horse battery staple"
        let registered = try await client.run(
            ["register", "--email", "confirm@example.com", "--password-stdin"], stdin: password)
        #expect(registered.status == 0, "\(registered.stderr)")
        #expect(
            registered.stderr.contains("Confirm confirm@example.com with the link we mailed"), "\(registered.stderr)")
        #expect(try client.cached() == nil, "no session before the confirmation")
        let login = ["login", "--provider", "custom", "--email", "confirm@example.com", "--password-stdin"]
        let refused = try await client.run(login, stdin: password)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("confirm your email address first"), "\(refused.stderr)")

        let resent = try await client.run(["register", "--resend", "--email", "confirm@example.com"])
        #expect(resent.status == 0, "\(resent.stderr)")
        #expect(try await client.run(["register", "--resend"]).status == 64)
        // The registration's link and the resent one.
        _ = try await sink.messages { $0.filter { $0["to"] == "confirm@example.com" }.count == 2 }
        let token = try sink.mailedToken(
            to: "confirm@example.com", subject: "Confirm your email address", path: "/auth/verify")
        let link = server.url + "/auth/verify?token=" + (try #require(token))
        let shots =
            ProcessInfo.processInfo.environment["BROKER_SCREENSHOTS"]
            ?? server.directory.appendingPathComponent("screenshots").path
        try FileManager.default.createDirectory(atPath: shots, withIntermediateDirectories: true)
        let browser = try await ProcessRunner.run(
            "/usr/bin/env", ["python3", TestPaths.interop("mail_link_in_chromium.py"), "verify", link, shots],
            timeout: .seconds(180))
        #expect(browser.status == 0, "\(browser.stderr)")
        let pages = try #require(JSONValue.parse(Array(browser.stdout.utf8)), "\(browser.stdout)")
        #expect(pages["page_title"]?.stringValue == "Confirm your email address")
        #expect(pages["result_title"]?.stringValue == "Your address is confirmed")

        let admitted = try await client.run(login, stdin: password)
        #expect(admitted.status == 0, "\(admitted.stderr)")
        let token2 = try await client.run(["token", "--format", "json"])
        #expect(token2.status == 0)
    }

    @Test func aMailServerThatIsDownIsLoggedWithoutTheLinkAndTheCommandStillSucceeds() async throws {
        let closed = try freeLoopbackPort()
        let server = try await BrokerProcess.start(
            config: #"{"mail": {"url": "smtp://127.0.0.1:\#(closed)", "from": "b@example.com", "max_attempts": 1}}"#)
        defer { server.stop() }
        let client = try ClientHome(server: server)
        try await client.register("down@example.com")
        let forgot = try await client.run(["password", "forgot", "--email", "down@example.com"])
        #expect(forgot.status == 0, "\(forgot.stderr)")
        let logged = try await eventually { server.stderr.contains("mail not sent, giving up") }
        #expect(logged, "\(server.stderr)")
        #expect(!server.stderr.contains("token="), "the link is never logged")
    }

    @Test func aBrokerWithoutMailSaysItCannotReset() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let forgot = try await client.run(["password", "forgot", "--email", "a@example.com"])
        #expect(forgot.status == 1)
        #expect(forgot.stderr.contains("does not send mail"), "\(forgot.stderr)")
    }
}
