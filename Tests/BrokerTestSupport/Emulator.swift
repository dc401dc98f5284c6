import BrokerClient
package import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerStore
package import BrokerSystem
import BrokerTesting
import Foundation
import Google
import MicrosoftAccount
import OpenIDConnect
import ProviderSupport
import Testing

/// `broker emulate` as a process: the provider emulators on a free loopback port.
package final class EmulatorProcess: @unchecked Sendable {
    package private(set) var process: ChildProcess!
    package let output: String
    package private(set) var url = ""

    package init(arguments: [String] = []) throws {
        let directory = try BrokerProcess.temporaryDirectory()
        output = directory.appendingPathComponent("emulator-out").path
        try Data().write(to: URL(fileURLWithPath: output))
        process = try ChildProcess(
            TestPaths.broker, ["emulate", "--port", "0"] + arguments, stdin: .null, stdout: .file(output),
            stderr: .inherit)
    }

    package static func start(arguments: [String] = []) async throws -> EmulatorProcess {
        let emulator = try EmulatorProcess(arguments: arguments)
        var line: Substring?
        let printed = try await eventually {
            let text = (try? String(contentsOfFile: emulator.output, encoding: .utf8)) ?? ""
            line = text.contains("\n") ? text.split(separator: "\n").first : nil
            return line != nil || emulator.process.termination != nil
        }
        if line == nil, let ended = emulator.process.termination {
            throw ServerTestError("broker emulate exited (\(ended)) before its ready line (its stderr is above)")
        }
        guard printed, let line else {
            // Once seen under a loaded suite (2026-11-29) with nothing on stderr: what every thread of the
            // process was doing says why the next time.
            let stacks = try? await ProcessRunner.run(
                "gdb", ["-p", "\(emulator.process.pid)", "-batch", "-ex", "thread apply all bt 16"],
                timeout: .seconds(120))
            emulator.process.send(SIGKILL)
            throw ServerTestError(
                "broker emulate printed no ready line within 180 s; its threads:\n"
                    + (stacks?.stdout ?? "(gdb did not run)"))
        }
        guard line.hasPrefix("emulator listening on http://") else {
            throw ServerTestError("unexpected emulator line: \(line)")
        }
        emulator.url = String(line.dropFirst("emulator listening on ".count))
        return emulator
    }

    /// A broker configuration with Google and Microsoft (tenant `tenant`) pointed at this emulator.
    package func brokerConfig(microsoftTenant tenant: String = "consumers") -> String {
        #"""
        {"providers": {"google": {"client_id": "emulated-google-client.apps.googleusercontent.com",
          "client_secret": "emulated-google-secret", "issuer": "\#(url)/google"},
          "microsoftaccount": {"client_id": "6731de76-14a6-49ae-97bc-6eba6914391e",
          "client_secret": "emulated-microsoft-secret", "tenant": "\#(tenant)",
          "issuer": "\#(url)/microsoft/{tenantid}/v2.0"},
          "facebook": {"client_id": "1234567890123456", "client_secret": "emulated-facebook-app-secret",
          "authorization_endpoint": "\#(url)/facebook/v19.0/dialog/oauth",
          "token_endpoint": "\#(url)/facebook/v19.0/oauth/access_token",
          "userinfo_endpoint": "\#(url)/facebook/v19.0/me"},
          "twitter": {"client_id": "ZW11bGF0ZWQtdHdpdHRlci1jbGllbnQ", "client_secret": "emulated-twitter-client-secret",
          "authorization_endpoint": "\#(url)/twitter/i/oauth2/authorize",
          "token_endpoint": "\#(url)/twitter/2/oauth2/token", "userinfo_endpoint": "\#(url)/twitter/2/users/me"},
          \#(newProviders),
          "custom": {"enabled": true}}}
        """#
    }

    /// GitHub, Apple (with the test key Config/emulated-apple.p8) and a provider of type `oidc` (`corp`, admitting
    /// corp.example), pointed at this emulator: Config/emulated.json's sections, as members of `providers`.
    package var newProviders: String {
        let key = TestPaths.repositoryRoot.appendingPathComponent("Config/emulated-apple.p8").path
        let icon = TestPaths.repositoryRoot.appendingPathComponent("Config/emulated-corp-icon.svg").path
        return #"""
            "github": {"client_id": "Iv1.0e5a7ed0c11e47ab", "client_secret": "emulated-github-client-secret-0123456789ab",
              "base_url": "\#(url)/github"},
            "apple": {"client_id": "com.example.broker.signin", "team_id": "EMULTEAM01", "key_id": "EMULKEY001",
              "private_key_file": "\#(key)", "issuer": "\#(url)/apple"},
            "corp": {"type": "oidc", "display_name": "Example Corp", "issuer": "\#(url)/oidc",
              "client_id": "emulated-oidc-client", "client_secret": "emulated-oidc-secret",
              "allowed_domains": ["corp.example"], "icon_file": "\#(icon)"}
            """#
    }

    package var brokerConfig: String { brokerConfig() }

    /// Only X, in OAuth 1.0a mode, pointed at this emulator.
    package func twitterOAuth1Config(consumerSecret: String = "emulated-consumer-secret") -> String {
        #"""
        {"providers": {"twitter": {"mode": "oauth1", "consumer_key": "emulated-consumer-key",
          "consumer_secret": "\#(consumerSecret)",
          "request_token_endpoint": "\#(url)/twitter/oauth/request_token",
          "authorize_endpoint": "\#(url)/twitter/oauth/authorize",
          "access_token_endpoint": "\#(url)/twitter/oauth/access_token",
          "verify_credentials_endpoint": "\#(url)/twitter/1.1/account/verify_credentials.json"}}}
        """#
    }

    /// Only Google (and custom): the other providers are disabled.
    package var googleOnlyConfig: String {
        #"""
        {"providers": {"google": {"client_id": "emulated-google-client.apps.googleusercontent.com",
          "client_secret": "emulated-google-secret", "issuer": "\#(url)/google"}, "custom": {"enabled": true}}}
        """#
    }

    deinit {
        // Never wait here: a deinit runs on whatever thread released the last reference.
        process.send(SIGKILL)
    }
}

/// The browser half of the flow, played by Tests/Interop/browser_flow.py (urllib, no redirects followed).
package func browserFlow(
    _ server: BrokerProcess, provider: String = "google", account: String = "alice", decision: String = "allow",
    mode: String = ""
) async throws -> JSONValue {
    let result = try await Interop.run(["browser_flow.py", server.url, provider, account, decision, mode])
    guard result.status == 0, let value = JSONValue.parse(Array(result.stdout.utf8)) else {
        throw ServerTestError("browser_flow.py: \(result.status) \(result.stderr)")
    }
    return value
}
