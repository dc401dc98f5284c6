import BrokerCore
import BrokerCrypto
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// Issue "A second factor" from the command line, as a person uses it: `broker mfa totp add` on a terminal
/// with pyotp as the authenticator app, the code asked after the password, a replay refused, scripts giving
/// the code on stdin, and a broker that requires a second factor.
@Suite("A second factor from the CLI")
struct SecondFactorCLITests {
    static let password = "correct horse battery staple"

    @Test func enrolOnATerminalThenEverySignInAsksForTheCode() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let client = try ClientHome(server: server)
        try await client.register("tess@example.com")

        let run = try await ProcessRunner.python(
            "totp_cli.py", [BrokerProcess.binary, server.url, client.home, "tess@example.com"],
            stdin: Array(Self.password.utf8), environment: client.environment)
        #expect(run.status == 0, "\(run.stderr)")
        let report = try #require(JSONValue.parse(Array(run.stdout.utf8)), "\(run.stdout)")
        let add = report["add"]?["output"]?.stringValue ?? ""
        #expect(report["add"]?["status"] == 0, "\(add)")
        #expect(add.contains("▀") || add.contains("▄"), "a QR code on the terminal")
        let key = try #require(report["key"]?.stringValue)
        #expect(report["uri_key"]?.stringValue == key, "the URI and the key as text say the same")
        #expect(report["recovery_codes"]?.arrayValue?.count == 10, "\(add)")
        let login = report["login"]?["output"]?.stringValue ?? ""
        #expect(report["login"]?["status"] == 0, "\(login)")
        #expect(login.contains("Code from your authenticator app:"))
        let replay = report["replay"]?["output"]?.stringValue ?? ""
        #expect(report["replay"]?["status"] == 1, "\(replay)")
        #expect(replay.contains("wrong or already used code"))

        let token = try await client.run(["token"])
        let claims = try #require(jwtParts(token.stdout.trimmingCharacters(in: .whitespacesAndNewlines)).claims)
        #expect(claims["acr"] == "2" && claims["amr"] == ["pwd", "otp", "mfa"], "\(token.stderr)")
        let status = try await client.run(["mfa", "status", "--json"])
        let document = try #require(JSONValue.parse(Array(status.stdout.utf8)), "\(status.stderr)")
        #expect(document["totp"] == true && document["recovery_codes_left"] == 10)

        // A script: without a code it is told how to give one; a recovery code on stdin's second line signs in.
        let scripted = try await client.run(
            ["login", "--provider", "custom", "--email", "tess@example.com", "--password-stdin"],
            stdin: Self.password + "\n")
        #expect(scripted.status == 1)
        #expect(scripted.stderr.contains("second factor") && scripted.stderr.contains("--password-stdin"))
        let recovery = try #require(report["recovery_codes"]?.arrayValue?.first?.stringValue)
        let withCode = try await client.run(
            ["login", "--provider", "custom", "--email", "tess@example.com", "--password-stdin"],
            stdin: Self.password + "\n" + recovery + "\n")
        #expect(withCode.status == 0, "\(withCode.stderr)")
        #expect(!withCode.stderr.contains(recovery), "the code is never echoed")
        let again = try await client.run(
            ["login", "--provider", "custom", "--email", "tess@example.com", "--password-stdin"],
            stdin: Self.password + "\n" + recovery + "\n")
        #expect(again.status == 1 && again.stderr.contains("wrong or already used code"), "\(again.stderr)")

        // Removing it takes the password and a code, not the session alone.
        let second = try #require(report["recovery_codes"]?.arrayValue?.dropFirst().first?.stringValue)
        let wrong = try await client.run(["mfa", "totp", "remove"], stdin: "not the password\n\(second)\n")
        #expect(wrong.status == 1 && wrong.stderr.contains("not removed"), "\(wrong.stderr)")
        let removed = try await client.run(["mfa", "totp", "remove"], stdin: Self.password + "\n" + second + "\n")
        #expect(removed.status == 0, "\(removed.stderr)")
        let plain = try await client.run(
            ["login", "--provider", "custom", "--email", "tess@example.com", "--password-stdin"],
            stdin: Self.password + "\n")
        #expect(plain.status == 0, "\(plain.stderr)")
    }

    @Test func aBrokerThatRequiresASecondFactorSaysHowToAddOne() async throws {
        let server = try await BrokerProcess.start(config: #"{"server": {"require_mfa": true}}"#)
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let registered = try await client.run(
            ["register", "--email", "uma@example.com", "--password-stdin"], stdin: Self.password + "\n")
        #expect(registered.status == 0 && registered.stderr.contains("broker mfa totp add"), "\(registered.stderr)")
        #expect(try client.cached() == nil, "no session before the second factor")
        let login = try await client.run(
            ["login", "--provider", "custom", "--email", "uma@example.com", "--password-stdin"],
            stdin: Self.password + "\n")
        #expect(login.status == 1)
        #expect(login.stderr.contains("broker mfa totp add"), "\(login.stderr)")
    }
}
