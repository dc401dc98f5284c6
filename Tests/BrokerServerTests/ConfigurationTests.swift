import BrokerConfiguration
import BrokerCore
import BrokerProviderSchemas
import BrokerProviders
import BrokerServer
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// Configuration files, environment variables and their errors.
@Suite("configuration")
struct ConfigurationTests {
    static func write(_ text: String) throws -> String {
        let file = try BrokerProcess.temporaryDirectory().appendingPathComponent("broker.json")
        try Data(text.utf8).write(to: file)
        return file.path
    }

    @Test func theExampleConfigLoads() throws {
        let path = BrokerProcess.repositoryRoot.appendingPathComponent("Config/broker.example.json").path
        let configuration = try ServerConfiguration.load(
            catalog: BrokerProviderSchemas.all, path: path, environment: [:])
        #expect(configuration.port == 8787 && configuration.audience == "broker")
        #expect(
            configuration.enabledProviders == [
                "google", "facebook", "microsoftaccount", "twitter", "github", "apple", "gitlab", .custom,
            ])
    }

    static func load(_ json: String, environment: [String: String] = [:]) throws(ConfigurationError)
        -> ServerConfiguration
    {
        try ServerConfiguration.load(
            catalog: BrokerProviderSchemas.all, file: (Array(json.utf8), "test.json"), environment: environment)
    }

    /// `"type": "oidc"` under ids of the operator's choosing: as many as configured, in id order where the type
    /// is in the catalog, each with its display name; declared in the environment alone too.
    @Test func providersOfATypeUnderAnyID() throws {
        let configuration = try Self.load(
            """
            {"providers": {
              "zitadel": {"type": "oidc", "issuer": "https://z.example", "client_id": "c", "client_secret": "s"},
              "corp-eu": {"type": "oidc", "issuer": "https://eu.example", "client_id": "c", "client_secret_file": "/f",
                          "display_name": "Corp (EU)", "allowed_domains": ["corp.example"],
                          "required_claims": ["groups=staff"], "scopes": ["openid", "email"]},
              "github": {"type": "github", "client_id": "g", "client_secret": "s"}, "custom": {"enabled": true}}}
            """,
            environment: [
                "BROKER_PROVIDERS_KEYCLOAK_TYPE": "oidc",
                "BROKER_PROVIDERS_KEYCLOAK_ISSUER": "https://kc.example/realms/a",
                "BROKER_PROVIDERS_KEYCLOAK_CLIENT_ID": "k", "BROKER_PROVIDERS_KEYCLOAK_CLIENT_SECRET": "ks",
                "BROKER_PROVIDERS_CORP_EU_ALLOWED_DOMAINS": "corp.example, corp.test",
            ])
        #expect(configuration.enabledProviders == ["github", "corp-eu", "keycloak", "zitadel", .custom])
        #expect(configuration.displayName("corp-eu") == "Corp (EU)")
        #expect(configuration.displayName("zitadel") == "zitadel", "no display_name: the id the operator chose")
        #expect(configuration.displayName("github") == "GitHub")
        #expect(configuration.providers["corp-eu"]?["allowed_domains"] == ["corp.example", "corp.test"])
        #expect(configuration.providers["keycloak"]?["issuer"] == "https://kc.example/realms/a")
        #expect(configuration.providerTypes["keycloak"] == "oidc")
    }

    @Test func providersOfATypeRefuseWhatIsWrong() {
        let base = #""issuer": "https://z.example", "client_id": "c", "client_secret": "s""#
        let cases: [(String, String, String)] = [
            (#"{"providers": {"x": {"type": "saml", \#(base)}}}"#, "providers.x.type", "unknown provider type"),
            (#"{"providers": {"x": {"type": 3}}}"#, "providers.x.type", "must be a string"),
            (#"{"providers": {"Corp": {"type": "oidc", \#(base)}}}"#, "providers.Corp.type", "lowercase"),
            (#"{"providers": {"passkey": {"type": "oidc", \#(base)}}}"#, "providers.passkey.type", "its own"),
            (#"{"providers": {"google": {"type": "oidc", \#(base)}}}"#, "providers.google.type", "its own"),
            (#"{"providers": {"mine": {"type": "github", \#(base)}}}"#, "providers.mine.type", "not under another id"),
            (
                #"{"providers": {"x": {"type": "oidc", "client_id": "c", "client_secret": "s"}}}"#,
                "providers.x.issuer",
                "required"
            ),
            (
                #"{"providers": {"x": {"type": "oidc", "issuer": "https://z.example", "client_id": "c"}}}"#,
                "providers.x.client_secret", "required"
            ),
            (
                #"{"providers": {"x": {"type": "oidc", \#(base), "client_secret_file": "/f"}}}"#,
                "providers.x.client_secret_file", "keep one"
            ),
            (
                #"{"providers": {"x": {"type": "oidc", \#(base), "token_endpoint_auth_method": "private_key_jwt"}}}"#,
                "providers.x.private_key_file", "required with private_key_jwt"
            ),
            (#"{"providers": {"x": {"type": "oidc", \#(base), "scopes": ["email"]}}}"#, "providers.x.scopes", "openid"),
            (#"{"providers": {"x": {"type": "oidc", \#(base), "scopes": "openid"}}}"#, "providers.x.scopes", "list"),
            (
                #"{"providers": {"x": {"type": "oidc", \#(base), "allowed_domains": ["@corp"]}}}"#,
                "providers.x.allowed_domains", "domain"
            ),
            (
                #"{"providers": {"x": {"type": "oidc", \#(base), "required_claims": ["groups"]}}}"#,
                "providers.x.required_claims", "claim=value"
            ),
            (
                #"{"providers": {"x": {"type": "oidc", \#(base), "tenant": "common"}}}"#, "providers.x.tenant",
                "unknown key"
            ),
            (
                #"{"providers": {"x": {"type": "oidc", "issuer": "http://z.example", "client_id": "c", "client_secret": "s"}}}"#,
                "providers.x.issuer", "https"
            ),
            (
                #"{"providers": {"apple": {"client_id": "c", "team_id": "short", "key_id": "KEY1234567"}}}"#,
                "providers.apple.team_id", "team id"
            ),
            (
                #"{"providers": {"apple": {"client_id": "c", "team_id": "ABCDE12345", "key_id": "KEY1234567"}}}"#,
                "providers.apple.private_key_file", "required"
            ),
            (#"{"providers": {"github": {"client_id": "c"}}}"#, "providers.github.client_secret", "required"),
            (
                #"{"providers": {"github": {"client_id": "c", "client_secret": "s", "client_secret_file": "/f"}}}"#,
                "providers.github.client_secret_file", "keep one"
            ),
            (
                #"{"providers": {"apple": {"client_id": "c", "team_id": "ABCDE12345", "key_id": "KEY1234567", "private_key_file": "/f", "private_key": "k"}}}"#,
                "providers.apple.private_key_file", "keep one"
            ),
            (
                #"{"providers": {"github": {"client_id": "c", "client_secret": "s", "base_url": "https://ghe.example/"}}}"#,
                "providers.github.base_url", "trailing slash"
            ),
        ]
        for (json, key, problem) in cases {
            do {
                _ = try Self.load(json)
                Issue.record("accepted: \(json)")
            } catch {
                #expect(error.key == key && error.problem.contains(problem), "\(json): \(error)")
            }
        }
        // The environment: a type for an id of another provider's, and a type against the file's.
        #expect(throws: ConfigurationError.self) {
            try Self.load("{}", environment: ["BROKER_PROVIDERS_FACEBOOK_TYPE": "oidc"])
        }
        #expect(throws: ConfigurationError.self) {
            try Self.load(
                #"{"providers": {"x": {"type": "oidc", \#(base)}}}"#, environment: ["BROKER_PROVIDERS_X_TYPE": "github"]
            )
        }
    }

    @Test func defaultsWithoutAFile() throws {
        let configuration = try ServerConfiguration.load(
            catalog: BrokerProviderSchemas.all, path: nil, environment: [:])
        #expect(configuration.host == "127.0.0.1" && configuration.port == 8787)
        #expect(configuration.accessTokenTTL == 3600 && configuration.refreshTokenTTL == 2_592_000)
        #expect(configuration.mintMaxTTL == 3600 && configuration.loginThrottle)
        #expect(configuration.enabledProviders == [.custom], "no providers key: custom only")
    }

    @Test func providersKeyListsWhatIsEnabled() throws {
        let path = try Self.write(#"{"providers": {"google": {"client_id": "x", "client_secret": "y"}}}"#)
        #expect(
            try ServerConfiguration.load(catalog: BrokerProviderSchemas.all, path: path, environment: [:])
                .enabledProviders
                == ["google"])
        let withCustom = try Self.write(#"{"providers": {"custom": {"enabled": true}}}"#)
        #expect(
            try ServerConfiguration.load(catalog: BrokerProviderSchemas.all, path: withCustom, environment: [:])
                .enabledProviders == [.custom])
    }

    @Test func environmentOverridesTheFile() throws {
        let path = try Self.write(#"{"server": {"port": 9000, "audience": "a"}}"#)
        let configuration = try ServerConfiguration.load(
            catalog: BrokerProviderSchemas.all,
            path: path,
            environment: [
                "BROKER_SERVER_PORT": "9100", "BROKER_SERVER_LOGIN_THROTTLE": "false",
                "BROKER_PROVIDERS_GOOGLE_CLIENT_SECRET": "from-env", "BROKER_URL": "ignored: a client variable",
            ]
        )
        #expect(configuration.port == 9100 && configuration.audience == "a" && !configuration.loginThrottle)
        #expect(configuration.providers["google"]?["client_secret"] == "from-env")
    }

    @Test(
        arguments: [
            (#"{"server": {"access_token_ttl": 4}}"#, "server.access_token_ttl", "at least 5"),
            (#"{"server": {"refresh_token_ttl": 0}}"#, "server.refresh_token_ttl", "at least 5"),
            (#"{"server": {"mint_max_ttl": -1}}"#, "server.mint_max_ttl", "at least 5"),
            (#"{"server": {"port": "8787"}}"#, "server.port", "integer"),
            (#"{"server": {"port": 70000}}"#, "server.port", "port number"),
            (#"{"server": {"host": ""}}"#, "server.host", "non-empty string"),
            (#"{"server": {"metrics_port": -1}}"#, "server.metrics_port", "port number"),
            (#"{"server": {"metrics_port": "9100"}}"#, "server.metrics_port", "integer"),
            (#"{"server": {"metrics_token_file": ""}}"#, "server.metrics_token_file", "non-empty string"),
            (#"{"server": {"audit_log": 1}}"#, "server.audit_log", "non-empty string"),
            (#"{"server": {"audit_store": "yes"}}"#, "server.audit_store", "true or false"),
            (#"{"server": {"login_throttle": 1}}"#, "server.login_throttle", "true or false"),
            (#"{"server": {"database_pool_size": 0}}"#, "server.database_pool_size", "must be between 1 and 1000"),
            (#"{"server": {"database_timeout": 301}}"#, "server.database_timeout", "between 1 and 300 seconds"),
            (#"{"server": {"password_hash_queue": 1025}}"#, "server.password_hash_queue", "between 1 and 1024"),
            (#"{"server": {"max_connections": 0}}"#, "server.max_connections", "between 1 and 1000000"),
            (#"{"server": {"registrations_per_hour": 0}}"#, "server.registrations_per_hour", "between 1 and 1000000"),
            (#"{"server": {"request_timeout": 0}}"#, "server.request_timeout", "between 1 and 3600 seconds"),
            (#"{"server": {"http_timeout": 0}}"#, "server.http_timeout", "between 1 and 3600 seconds"),
            (#"{"server": {"webauthn_rp_id": "127.0.0.1"}}"#, "server.webauthn_rp_id", "not an IP address"),
            (#"{"server": {"client_registration": "yes"}}"#, "server.client_registration", "\"off\", \"token\" or"),
            (
                #"{"server": {"client_metadata_hosts": "apps.example,b_c"}}"#, "server.client_metadata_hosts",
                "\"b_c\" is not one"
            ),
            (#"{"server": {"client_metadata_hosts": [""]}}"#, "server.client_metadata_hosts", "list of host names"),
            (#"{"server": {"client_metadata_hosts": ["a/b"]}}"#, "server.client_metadata_hosts", "\"a/b\" is not one"),
            (#"{"server": {"client_metadata_hosts": 3}}"#, "server.client_metadata_hosts", "list of host names"),
            (
                #"{"server": {"trusted_proxies": ["10.0.0.0/8", "nope"]}}"#, "server.trusted_proxies",
                "\"nope\" is not one"
            ),
            (#"{"server": {"ca_file": ""}}"#, "server.ca_file", "non-empty string"),
            (#"{"server": {"webauthn_rp_id": "[::1]"}}"#, "server.webauthn_rp_id", "not an IP address"),
            (#"{"server": {"webauthn_rp_id": "bad host!"}}"#, "server.webauthn_rp_id", "a host name"),
            (#"{"server": {"webauthn_rp_id": "-x.example"}}"#, "server.webauthn_rp_id", "a host name"),
            (#"{"server": {"acess_token_ttl": 60}}"#, "server.acess_token_ttl", "unknown key"),
            (#"{"server": []}"#, "server", "object"),
            (#"{"servers": {}}"#, "servers", "unknown key"),
            (#"{"providers": {"gitlab": {}}}"#, "providers.gitlab", "unknown provider"),
            (#"{"providers": {"google": {"client_id": 1}}}"#, "providers.google.client_id", "string"),
            (
                #"{"providers": {"google": {"token_endpoint": "http://evil.example/token"}}}"#,
                "providers.google.token_endpoint", "https"
            ),
            (#"{"providers": {"twitter": {"mode": "oauth3"}}}"#, "providers.twitter.mode", "oauth2"),
            (#"{"providers": {"twitter": {"mode": "oauth1"}}}"#, "providers.twitter.consumer_key", "required"),
            (#"{"server": {"issuer": "ftp://x"}}"#, "server.issuer", "http"),
            (#"{"server": {"database": "mysql://x"}}"#, "server.database", "postgres"),
            (#"[1]"#, nil, "JSON object"),
            (#"{"server": {"port": 1,}}"#, nil, "not valid JSON"),
            (#"{"server": {"port": 1}, "server": {"port": 2}}"#, nil, "duplicate"),
        ] as [(String, String?, String)])
    func badFilesNameTheFileAndTheKey(text: String, key: String?, says: String) throws {
        let path = try Self.write(text)
        let error = try #require(throws: ConfigurationError.self) {
            try ServerConfiguration.load(catalog: BrokerProviderSchemas.all, path: path, environment: [:])
        }
        #expect(error.source == path)
        #expect(error.key == key)
        #expect(error.description.contains(says), "\(error)")
    }

    @Test func badEnvironmentNamesTheVariable() throws {
        let error = try #require(throws: ConfigurationError.self) {
            try ServerConfiguration.load(
                catalog: BrokerProviderSchemas.all, path: nil, environment: ["BROKER_SERVER_PORT": "eighty"])
        }
        #expect(error.key == "BROKER_SERVER_PORT" && error.description.contains("integer"))
        let unknown = try #require(throws: ConfigurationError.self) {
            try ServerConfiguration.load(
                catalog: BrokerProviderSchemas.all, path: nil, environment: ["BROKER_SERVER_PROT": "1"])
        }
        #expect(unknown.key == "BROKER_SERVER_PROT")
    }

}
