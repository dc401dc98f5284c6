import BrokerConfiguration
import BrokerCore
import BrokerProviderSchemas
import BrokerServer
import BrokerTesting
import Foundation
import Testing

/// `broker serve`'s start before any listener: the secrets it reads besides its configuration. Each failure
/// names the file or the keys, and reads nothing past it.
@Suite("broker serve's start: the secrets outside the configuration")
struct StartupTests {
    static func configuration(_ json: String) throws -> ServerConfiguration {
        let directory = try TemporaryDirectory.make(prefix: "broker-startup")
        let file = directory.appendingPathComponent("broker.json")
        try Data(json.utf8).write(to: file)
        return try ServerConfiguration.load(catalog: BrokerProviderSchemas.all, path: file.path, environment: [:])
    }

    static func secretFile(_ text: String) throws -> String {
        let file = try TemporaryDirectory.make(prefix: "broker-startup").appendingPathComponent("secret")
        try Data(text.utf8).write(to: file)
        return file.path
    }

    @Test func nothingConfiguredReadsNothing() throws {
        let secrets = try BrokerStartup.secrets(try Self.configuration("{}"), environment: [:])
        #expect(secrets.metricsToken == nil && secrets.mailPassword == nil)
    }

    @Test func theMetricsTokenComesFromItsFileWithoutTheLineBreak() throws {
        let file = try Self.secretFile("metrics-token-value\n")
        let configuration = try Self.configuration(#"{"server": {"metrics_token_file": "\#(file)"}}"#)
        let secrets = try BrokerStartup.secrets(configuration, environment: [:])
        #expect(secrets.metricsToken?.exposed == "metrics-token-value")
        #expect(BrokerStartup.metricsEndpoint(configuration, secrets: secrets).token?.exposed == "metrics-token-value")
    }

    @Test func anUnreadableOrEmptyTokenFileStopsTheStartNamingIt() throws {
        for (file, reason) in [
            ("/nonexistent/broker/metrics-token", "/nonexistent/broker/metrics-token"),
            (try Self.secretFile("\n"), "empty"),
        ] {
            let configuration = try Self.configuration(#"{"server": {"metrics_token_file": "\#(file)"}}"#)
            #expect {
                try BrokerStartup.secrets(configuration, environment: [:])
            } throws: { error in
                let said = "\(error)"
                return said.contains("cannot read the metrics token file \(file)") && said.contains(reason)
            }
        }
    }

    @Test func theMailPasswordIsTheEnvironmentsElseItsFile() throws {
        let file = try Self.secretFile("from-the-file\n")
        let configuration = try Self.configuration(
            #"""
            {"mail": {"url": "smtp://127.0.0.1:2525", "from": "Broker <broker@example.com>", "username": "broker",
                      "password_file": "\#(file)"}}
            """#)
        #expect(try BrokerStartup.secrets(configuration, environment: [:]).mailPassword?.exposed == "from-the-file")
        let fromEnvironment = try BrokerStartup.secrets(
            configuration, environment: ["BROKER_MAIL_PASSWORD": "from-the-environment"])
        #expect(fromEnvironment.mailPassword?.exposed == "from-the-environment")
        // An empty variable is no password: the file's counts.
        let empty = try BrokerStartup.secrets(configuration, environment: ["BROKER_MAIL_PASSWORD": ""])
        #expect(empty.mailPassword?.exposed == "from-the-file")
    }

    @Test func aMailUserWithoutAPasswordOrWithAMissingFileIsRefused() throws {
        let noPassword = try Self.configuration(
            #"{"mail": {"url": "smtp://127.0.0.1:2525", "from": "b@example.com", "username": "broker"}}"#)
        #expect {
            try BrokerStartup.secrets(noPassword, environment: [:])
        } throws: { "\($0)".contains("mail.username is set but there is no password") }
        let missing = try Self.configuration(
            #"""
            {"mail": {"url": "smtp://127.0.0.1:2525", "from": "b@example.com", "username": "broker",
                      "password_file": "/nonexistent/broker/mail-password"}}
            """#)
        #expect {
            try BrokerStartup.secrets(missing, environment: [:])
        } throws: { "\($0)".contains("cannot read mail.password_file /nonexistent/broker/mail-password") }
        // Without a user, no password is needed.
        let anonymous = try Self.configuration(#"{"mail": {"url": "smtp://127.0.0.1:2525", "from": "b@example.com"}}"#)
        #expect(try BrokerStartup.secrets(anonymous, environment: [:]).mailPassword == nil)
    }

    @Test func theLimitsAreTheConfigurations() throws {
        let configuration = try Self.configuration(
            #"{"server": {"max_connections": 77, "request_timeout": 9, "max_connections_per_address": 5}}"#)
        let limits = BrokerStartup.limits(configuration)
        #expect(limits.maxConnections == 77 && limits.requestTimeout == 9 && limits.perAddress == 5)
    }
}
