import BrokerCore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// The account page and the second factor in a real headless Chromium against the real binary, as a person uses
/// them (Tests/Interop/account_in_chromium.py; pyotp plays the authenticator app): enrolment on the page, sign-in
/// with the password and a recovery code, then a code from a phone whose clock runs ahead, a spent recovery code
/// refused, and recovery by the mailed link once the codes are lost too. Screenshots at a phone's and a
/// desktop's width go to $BROKER_SCREENSHOTS (default: the test's folder); docs/ shows some of them.
@Suite("The account page in Chromium")
struct AccountPageChromiumTests {
    static let password = "correct horse battery staple"

    @Test func enrolmentSignInWithBothFactorsAndRecoveryByMailInChromium() async throws {
        let sink = try await SMTPSink.start()
        let server = try await BrokerProcess.start(
            config: #"{"mail": {"url": "\#(sink.url)", "from": "Broker <broker@example.com>"}}"#)
        defer { server.stop() }
        let client = try ClientHome(server: server)
        try await client.register("page@example.com", password: Self.password)
        let shots =
            ProcessInfo.processInfo.environment["BROKER_SCREENSHOTS"]
            ?? server.directory.appendingPathComponent("screenshots").path
        try FileManager.default.createDirectory(atPath: shots, withIntermediateDirectories: true)
        let environment = ["ACCOUNT_PASSWORD": Self.password]
        // A confirmed address: recovery by mail goes only there.
        _ = try await sink.messages(from: server) { $0.contains { $0["subject"] == "Confirm your email address" } }
        let verify = try #require(
            try sink.mailedToken(to: "page@example.com", subject: "Confirm your email address", path: "/auth/verify"))
        let confirmed = try await ProcessRunner.python(
            "mail_link_in_chromium.py", ["verify", server.url + "/auth/verify?token=" + verify, shots])
        #expect(confirmed.status == 0, "\(confirmed.stdout) \(confirmed.stderr)")

        let enrol = try await ProcessRunner.python(
            "account_in_chromium.py", ["enrol", server.url, "page@example.com", shots, "ACCOUNT_PASSWORD"],
            environment: environment)
        let pages = try #require(JSONValue.parse(Array(enrol.stdout.utf8)), "\(enrol.stdout) \(enrol.stderr)")
        #expect(enrol.status == 0, "\(enrol.stdout) \(enrol.stderr)")
        #expect(pages["sign_in_title"]?.stringValue == "Sign in to your account page")
        #expect(pages["account_title"]?.stringValue == "Your account")
        #expect(pages["enrolment_title"]?.stringValue == "Add an authenticator app")
        #expect(pages["qr_code"] == true)
        #expect(pages["codes_title"]?.stringValue == "Your recovery codes")
        #expect(pages["recovery_codes"] == 10)
        #expect(pages["after_enrolment"]?.stringValue?.contains("10 recovery codes left") == true)
        #expect(pages["code_step_title"]?.stringValue == "Two-step sign-in")
        #expect(pages["after_recovery_code"]?.stringValue?.contains("9 recovery codes left") == true)
        #expect(
            pages["after_recovery_code"]?.stringValue?.contains("with your password and a code") == true,
            "signed in with two factors")
        #expect(pages["reused_recovery_code"]?.stringValue?.contains("Wrong or already used code") == true)
        #expect(pages["after_drifted_code"]?.stringValue?.contains("Signed in as page@example.com") == true)
        let status = try await client.run(["mfa", "status", "--json"])
        #expect(JSONValue.parse(Array(status.stdout.utf8))?["totp"] == true, "\(status.stderr)")

        let lost = try await ProcessRunner.python(
            "account_in_chromium.py", ["lost", server.url, "page@example.com", shots, "ACCOUNT_PASSWORD"],
            environment: environment)
        #expect(lost.status == 0, "\(lost.stdout) \(lost.stderr)")
        let asked = try #require(JSONValue.parse(Array(lost.stdout.utf8)), "\(lost.stdout)")
        #expect(asked["lost_title"]?.stringValue == "Lost your authenticator app?")
        #expect(asked["lost_result"]?.stringValue == "Check your mail")
        _ = try await sink.messages(from: server) {
            $0.contains { $0["subject"] == "Remove the second factor of your account" }
        }
        let token = try #require(
            try sink.mailedToken(
                to: "page@example.com", subject: "Remove the second factor of your account",
                path: "/auth/mfa/recover"))

        let recover = try await ProcessRunner.python(
            "account_in_chromium.py",
            ["recover", server.url + "/auth/mfa/recover?token=" + token, shots, "ACCOUNT_PASSWORD"],
            environment: environment)
        #expect(recover.status == 0, "\(recover.stdout) \(recover.stderr)")
        let recovered = try #require(JSONValue.parse(Array(recover.stdout.utf8)), "\(recover.stdout)")
        #expect(recovered["recover_title"]?.stringValue == "Remove your second factor")
        #expect(recovered["recover_result"]?.stringValue == "The second factor was removed")
        #expect(recovered["after_recovery_title"]?.stringValue == "Sign in to your account page", "every session ended")
        let after = try await client.run(["mfa", "status", "--json"])
        #expect(after.status == 4, "the CLI's session ended with the rest: \(after.stderr)")
        let login = try await client.run(
            ["login", "--provider", "custom", "--email", "page@example.com", "--password-stdin"],
            stdin: Self.password + "\n")
        #expect(login.status == 0, "the password alone signs in again: \(login.stderr)")
        for name in ["account-page", "account-totp-enrolment", "account-recovery-codes", "sign-in-second-factor"] {
            #expect(FileManager.default.fileExists(atPath: shots + "/\(name)-phone.png"))
        }
    }
}
