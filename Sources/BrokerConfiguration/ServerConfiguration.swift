package import BrokerCore
import BrokerSystem
package import ProviderSchemaSupport

/// `broker serve`'s settings: defaults, then the JSON file, then `BROKER_…` environment variables; the
/// command's flags are applied last by the caller.
///
/// Environment names: `BROKER_SERVER_<KEY>` for a `server` key (`BROKER_SERVER_ACCESS_TOKEN_TTL=600`) and
/// `BROKER_PROVIDERS_<PROVIDER>_<KEY>` for a provider key (`BROKER_PROVIDERS_GOOGLE_CLIENT_SECRET=…`); a provider
/// of a type (`"type": "oidc"`) has the id its section gives it, with `-` written `_`, and may be declared there
/// alone (`BROKER_PROVIDERS_CORP_TYPE=oidc`).
package struct ServerConfiguration: Sendable {
    package var host = "127.0.0.1"
    package var port = 8787
    /// `iss` and the discovery base; `http://host:port` when `nil`.
    package var issuer: String?
    package var dataDirectory = "~/.local/share/broker"
    package var database: String?
    package var signingKeyFile: String?
    /// The file holding the master key that seals signing and secret keys in the store (base64, 32 bytes).
    package var masterKeyFile: String?
    /// A file holding the PostgreSQL password (instead of `BROKER_DATABASE_PASSWORD`).
    package var databasePasswordFile: String?
    /// The most PostgreSQL connections one broker opens.
    package var databasePoolSize = 10
    /// Seconds one store call may take before the request is answered 503.
    package var databaseTimeout: Int64 = 5
    package var audience = "broker"
    package var accessTokenTTL: Int64 = 3600
    package var refreshTokenTTL: Int64 = 2_592_000
    package var mintMaxTTL: Int64 = 3600
    /// Per-account and per-address back-off after failed logins.
    package var loginThrottle = true
    /// Threads that hash passwords; `nil`: one per core.
    package var passwordHashWorkers: Int?
    /// Hash jobs allowed to wait for a thread before logins get 429; `nil`: four per worker.
    package var passwordHashQueue: Int?
    /// Open connections served at once; above it a new connection is answered 503 (lowered at start to fit
    /// the descriptor limit).
    package var maxConnections = 4096
    /// Connections one source network (an IPv4 address, an IPv6 /64) may hold at once
    /// (`server.max_connections_per_address`); `nil`: an eighth of ``maxConnections``, at least 16. Trusted
    /// proxies are exempt (attack review RT2-10).
    package var maxConnectionsPerAddress: Int?
    /// `server.trusted_proxies`: peers whose `X-Forwarded-For` names the client (default: none).
    package var trustedProxies = TrustedProxies()

    /// How long the broker's own browser sign-in lasts (`server.browser_session_ttl`, seconds; default 8 hours).
    package var browserSessionTTL: Int64 = 28_800

    /// The per-network share in force.
    package var connectionsPerAddress: Int { maxConnectionsPerAddress ?? max(16, maxConnections / 8) }
    /// Seconds a connection may take to deliver one whole request, idle time before it included.
    package var requestTimeout: Int64 = 30
    /// Seconds the broker waits for a sign-in provider or a trusted issuer to answer one request (discovery,
    /// keys, code and token exchanges; `server.http_timeout`, default 20).
    package var httpTimeout: Int64 = 20
    /// New accounts a client address may register per hour (a burst of as many at once).
    package var registrationsPerHour = 10
    /// A port of its own for `GET /metrics` (on ``metricsHost``); `nil`: served on the main port.
    package var metricsPort: Int?
    /// The address the metrics port listens on: loopback unless set (RT2-9), so that a broker serving the world
    /// on `0.0.0.0` does not show its metrics port to it too.
    package var metricsHost = "127.0.0.1"
    /// A file holding the bearer token `GET /metrics` requires; `nil`: no token.
    package var metricsTokenFile: String?
    /// Where the audit trail goes: a file path, or `stderr` (the default).
    package var auditLog = "stderr"
    /// Whether audit events are also kept in the store (for `broker audit list`).
    package var auditStore = false
    /// How long events stay in the store (`server.audit_retention`, seconds; default 90 days): older ones are
    /// deleted by the broker's periodic purge, so that a trail refused requests write cannot grow for ever.
    package var auditRetention: Int64 = 90 * 86_400
    /// Login refuses custom accounts whose address has not been verified (`server.require_verified_email`).
    package var requireVerifiedEmail = false
    /// Every app's authorization request must be pushed first (`server.require_par`, RFC 9126 §5).
    package var requirePAR = false
    /// Every password sign-in must be finished with a second factor, and accounts without one are sent to add
    /// it first (`server.require_mfa`, issue "A second factor").
    package var requireMFA = false
    /// The WebAuthn relying-party id passkeys are made for (`server.webauthn_rp_id`); `nil`: the issuer's host,
    /// unless that is an IP address (browsers refuse one), and then passkeys are off (``PasskeySettings``).
    package var webAuthnRPID: String?
    /// DPoP proofs must carry a nonce the broker gave (`server.dpop_nonce`, RFC 9449 §8–9).
    package var dpopNonce = false
    /// Whether apps may register themselves at `POST /auth/clients` (RFC 7591, `server.client_registration`).
    package var clientRegistration = ClientRegistration.off
    /// The hosts whose https URLs may be an app's `client_id` (Client ID Metadata Documents,
    /// `server.client_metadata_hosts`), lowercased; a listed loopback or private host is allowed. Empty: with
    /// `client_registration: open`, any host with a public address; otherwise none.
    package var clientMetadataHosts: [String] = []
    /// A PEM bundle every outbound https call of the broker verifies against instead of the system's trust store
    /// (`server.ca_file`: providers, trusted issuers, metadata documents, back-channel logout).
    package var caFile: String?

    /// Whether an https URL may be an app's `client_id` here (Client ID Metadata Documents).
    package var acceptsClientMetadataDocuments: Bool { clientRegistration == .open || !clientMetadataHosts.isEmpty }
    /// Registration answers alike whether or not the address has an account (`server.enumeration_protection`):
    /// 202 and mail to the address — a confirmation link for a new account, a note with a reset link for an
    /// existing one — instead of 201 with a session or 409 `account_exists`.
    package var enumerationProtection = false
    /// How long a device code (RFC 8628) may wait for its approval (`server.device_code_ttl`, seconds).
    package var deviceCodeTTL: Int64 = 600
    /// The device's polling interval to begin with (`server.device_poll_interval`, seconds).
    package var devicePollInterval: Int64 = 5
    /// The `mail` section: how the broker sends verification and reset mail; `nil`: no mail is sent.
    package var mail: MailConfiguration?
    /// Provider sections as given (validated key by key); `custom` is described by ``customEnabled``.
    package var providers: [ProviderID: [String: JSONValue]] = [:]
    /// The providers of a type (`providers.corp` with `"type": "oidc"`): each one's type, the id of a typed
    /// schema in the catalog.
    package var providerTypes: [ProviderID: ProviderID] = [:]
    package var customEnabled = true
    /// The schemas of the provider modules this build offers (the executable's list); sections for others are
    /// refused.
    package var catalog: [ProviderSchema] = []

    package init(catalog: [ProviderSchema] = []) {
        self.catalog = catalog
    }

    /// The smallest lifetime accepted anywhere (CONTRACT.md "Configuration file").
    package static let minimumTTL: Int64 = 5

    /// The providers this broker offers, in the catalog's order (those of one type by id, where the type is),
    /// then `custom`.
    package var enabledProviders: [ProviderID] {
        catalog.flatMap { schema in
            schema.typed
                ? providerTypes.filter { $0.value == schema.id }.keys.sorted()
                : (providers[schema.id] != nil ? [schema.id] : [])
        } + (customEnabled ? [.custom] : [])
    }

    /// The schema of a provider this broker may offer: the catalog's of that id, or the type's of a provider of a
    /// type.
    package func schema(_ id: ProviderID) -> ProviderSchema? {
        if let type = providerTypes[id] { return catalog.first { $0.typed && $0.id == type } }
        return catalog.first { !$0.typed && $0.id == id }
    }

    /// The name people see for an enabled provider: a typed one's `display_name`, else its schema's.
    package func displayName(_ id: ProviderID) -> String? {
        guard let schema = schema(id) else { return id == .custom ? "Email and password" : nil }
        return schema.displayName(for: ProviderSection(id: id, values: providers[id] ?? [:]))
    }

    /// Every provider id a configuration may name: the catalog's own, those given a type, and `custom`.
    var knownProviders: [ProviderID] {
        catalog.filter { !$0.typed }.map(\.id) + providerTypes.keys.sorted() + [.custom]
    }

    /// Ids a provider of a type may not take: the broker's own ways in and its own client.
    static let reservedProviderIDs: Set<String> = [
        "custom", "custom-otp", "passkey", "broker", "broker-cli", "device", "start", "mfa", "account",
    ]

    /// Records `name` as a provider of `type` (a typed schema), or explains why it cannot be one.
    mutating func declareProvider(_ name: String, type: String, source: String, key: String)
        throws(ConfigurationError)
    {
        guard let schema = catalog.first(where: { $0.id.rawValue == type }) else {
            let types = catalog.filter(\.typed).map { "\"\($0.id)\"" }.joined(separator: ", ")
            throw ConfigurationError(
                source: source, key: key, problem: "unknown provider type \"\(type.prefix(64))\" (known: \(types))")
        }
        guard schema.typed else {
            guard name == type else {
                throw ConfigurationError(
                    source: source, key: key,
                    problem: "\(schema.displayName) is configured as providers.\(type), not under another id")
            }
            return
        }
        guard let id = ProviderID(rawValue: name), name.utf8.first.map({ $0 >= 0x61 && $0 <= 0x7A }) == true,
            !name.contains("_")
        else {
            throw ConfigurationError(
                source: source, key: key,
                problem: "a provider id is 1 to 32 lowercase letters, digits and hyphens, starting with a letter")
        }
        guard !Self.reservedProviderIDs.contains(name), !catalog.contains(where: { $0.id == id }) else {
            throw ConfigurationError(
                source: source, key: key, problem: "\"\(name)\" is the id of a provider of its own; choose another")
        }
        providerTypes[id] = schema.id
    }

    /// Where the SQLite store and the generated signing keys live (`~` expanded).
    package var expandedDataDirectory: String { PosixFile.expandingTilde(dataDirectory) }
}

/// The `mail` section. The password is never in it: `BROKER_MAIL_PASSWORD`, or the file `password_file` names.
package struct MailConfiguration: Sendable, Equatable {
    /// `smtp://HOST[:PORT]` (STARTTLS required unless the host is this machine) or `smtps://HOST[:PORT]`.
    package var url = ""
    /// The sender, `someone@example.com` or `Name <someone@example.com>`.
    package var from = ""
    package var username: String?
    package var passwordFile: String?
    /// A CA bundle to verify the mail server's certificate against instead of the system's.
    package var caFile: String?
    /// A folder whose templates (`reset.txt`, `reset.html`, `verify.txt`, `verify.html`) replace the built-in ones.
    package var templatesDirectory: String?
    /// Attempts per message before it is given up (and logged).
    package var maxAttempts = 4

    package init() {}

    static let keys: Set<String> = [
        "url", "from", "username", "password_file", "ca_file", "templates_dir", "max_attempts",
    ]
}

/// A configuration that cannot be used: the file (or variable) and the key, and what is wrong.
package struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    package let source: String
    package let key: String?
    package let problem: String

    package init(source: String, key: String?, problem: String) {
        self.source = source
        self.key = key
        self.problem = problem
    }

    package var description: String {
        if let key { return "\(source): \(key): \(problem)" }
        return "\(source): \(problem)"
    }
}

/// Who may register an app at `POST /auth/clients` (RFC 7591).
package enum ClientRegistration: String, Sendable, CaseIterable {
    /// Nobody: apps are added by the operator (`broker client add`); the endpoint is not published.
    case off
    /// A client presenting an initial access token from `broker client registration-token` (RFC 7591 §3): public
    /// or confidential, the redirect URIs `broker client add` accepts.
    case token
    /// Anyone, for public clients only (no secret), with loopback or https redirect URIs, a few per address per
    /// hour: what an MCP client expects to find.
    case open
}

extension ServerConfiguration {
    static let serverKeys: Set<String> = [
        "host", "port", "issuer", "data_dir", "database", "signing_key_file", "audience", "access_token_ttl",
        "refresh_token_ttl", "mint_max_ttl", "login_throttle", "password_hash_workers", "password_hash_queue",
        "max_connections", "max_connections_per_address", "trusted_proxies", "browser_session_ttl", "request_timeout",
        "http_timeout",
        "registrations_per_hour", "master_key_file", "database_password_file",
        "database_pool_size", "database_timeout", "metrics_port", "metrics_host",
        "metrics_token_file",
        "audit_log", "audit_store", "audit_retention", "require_verified_email", "enumeration_protection",
        "require_par", "require_mfa", "dpop_nonce", "webauthn_rp_id",
        "device_code_ttl", "device_poll_interval", "client_registration", "client_metadata_hosts", "ca_file",
    ]

    /// Reads the file at `path` (if any) over the defaults, then the environment over both.
    package static func load(
        catalog: [ProviderSchema], path: String?, environment: [String: String]
    ) throws(ConfigurationError) -> ServerConfiguration {
        guard let path else { return try load(catalog: catalog, file: nil, environment: environment) }
        let bytes: [UInt8]
        do {
            bytes = try PosixFile.read(path: path, maxSize: 1024 * 1024)
        } catch {
            throw ConfigurationError(source: path, key: nil, problem: "cannot read: \(error.reason)")
        }
        return try load(catalog: catalog, file: (bytes, path), environment: environment)
    }

    /// Reads a config file's `bytes` (named `source` in errors) over the defaults, then the environment over
    /// both, and validates the whole. Pure, so that it can be fuzzed (`Fuzz/config`).
    package static func load(
        catalog: [ProviderSchema], file: (bytes: [UInt8], source: String)?, environment: [String: String]
    ) throws(ConfigurationError) -> ServerConfiguration {
        var configuration = ServerConfiguration(catalog: catalog)
        if let file {
            let document: JSONValue
            switch JSONValue.parseReportingError(file.bytes) {
            case .success(let value): document = value
            case .failure(let error):
                throw ConfigurationError(source: file.source, key: nil, problem: "not valid JSON: \(error)")
            }
            try configuration.apply(document: document, source: file.source)
        }
        try configuration.apply(environment: environment)
        try configuration.validate(source: file?.source ?? "configuration")
        return configuration
    }

    mutating func apply(document: JSONValue, source: String) throws(ConfigurationError) {
        guard let root = document.objectValue else {
            throw ConfigurationError(source: source, key: nil, problem: "must be a JSON object")
        }
        for key in root.keys.sorted() where key != "server" && key != "providers" && key != "mail" {
            throw ConfigurationError(
                source: source, key: key, problem: "unknown key (expected server, providers, mail)")
        }
        if let mailValue = root["mail"] {
            guard let members = mailValue.objectValue else {
                throw ConfigurationError(source: source, key: "mail", problem: "must be an object")
            }
            for (key, value) in members.sorted(by: { $0.key < $1.key }) {
                try setMailKey(key, value: value, source: source, name: "mail.\(key)")
            }
        }
        if let server = root["server"] {
            guard let members = server.objectValue else {
                throw ConfigurationError(source: source, key: "server", problem: "must be an object")
            }
            for (key, value) in members.sorted(by: { $0.key < $1.key }) {
                guard Self.serverKeys.contains(key) else {
                    throw ConfigurationError(source: source, key: "server.\(key)", problem: "unknown key")
                }
                try setServerKey(key, value: value, source: source, name: "server.\(key)")
            }
        }
        if let providersValue = root["providers"] {
            guard let members = providersValue.objectValue else {
                throw ConfigurationError(source: source, key: "providers", problem: "must be an object")
            }
            // With a `providers` key, only what it lists is enabled — custom included.
            customEnabled = false
            for name in members.keys.sorted() {
                if let type = members[name]?["type"] {
                    guard let text = type.stringValue else {
                        throw ConfigurationError(
                            source: source, key: "providers.\(name).type", problem: "must be a string")
                    }
                    try declareProvider(name, type: text, source: source, key: "providers.\(name).type")
                }
                guard let provider = ProviderID(rawValue: name), knownProviders.contains(provider) else {
                    let known = knownProviders.map(\.rawValue).joined(separator: ", ")
                    throw ConfigurationError(
                        source: source,
                        key: "providers.\(name)",
                        problem: "unknown provider (known: \(known))"
                    )
                }
                guard let section = members[name]?.objectValue else {
                    throw ConfigurationError(source: source, key: "providers.\(name)", problem: "must be an object")
                }
                for (key, value) in section.sorted(by: { $0.key < $1.key }) {
                    try setProviderKey(provider, key, value: value, source: source, name: "providers.\(name).\(key)")
                }
                if provider == .custom {
                    customEnabled = section["enabled"]?.boolValue ?? true
                    providers[.custom] = nil
                } else if providers[provider] == nil {
                    providers[provider] = [:]
                }
            }
        }
    }

    mutating func apply(environment: [String: String]) throws(ConfigurationError) {
        for (variable, text) in environment.sorted(by: { $0.key < $1.key }) {
            if variable.hasPrefix("BROKER_SERVER_") {
                let key = variable.dropFirst("BROKER_SERVER_".count).lowercased()
                guard Self.serverKeys.contains(key) else {
                    throw ConfigurationError(source: "environment", key: variable, problem: "unknown setting")
                }
                try setServerKey(key, value: Self.environmentValue(text), source: "environment", name: variable)
            } else if variable.hasPrefix("BROKER_MAIL_"), variable != "BROKER_MAIL_PASSWORD" {
                // BROKER_MAIL_PASSWORD is the secret itself, read when mail is set up, never a setting.
                let key = variable.dropFirst("BROKER_MAIL_".count).lowercased()
                try setMailKey(key, value: Self.environmentValue(text), source: "environment", name: variable)
            } else if variable.hasPrefix("BROKER_PROVIDERS_") {
                let rest = variable.dropFirst("BROKER_PROVIDERS_".count).lowercased()
                guard rest.hasSuffix("_type") else { continue }
                // Declared before any key: a provider of a type may exist in the environment alone. A name
                // that begins with another provider's id is that provider's key (`…_GOOGLE_SOMETHING_TYPE`).
                let written = String(rest.dropLast("_type".count))
                let known = knownProviders.first { $0.rawValue.replacing("-", with: "_") == written }
                let ownKey = knownProviders.contains { written.hasPrefix($0.rawValue.replacing("-", with: "_") + "_") }
                guard known != nil || !ownKey else { continue }
                let name = known?.rawValue ?? written.replacing("_", with: "-")
                if let known, let type = providerTypes[known] {
                    guard type.rawValue == text else {
                        throw ConfigurationError(
                            source: "environment", key: variable,
                            problem: "providers.\(known) is of type \(type) in the configuration file")
                    }
                    continue
                }
                try declareProvider(name, type: text, source: "environment", key: variable)
                if let id = ProviderID(rawValue: name), providerTypes[id] != nil, providers[id] == nil {
                    providers[id] = [:]
                }
            }
        }
        for (variable, text) in environment.sorted(by: { $0.key < $1.key }) {
            if variable.hasPrefix("BROKER_PROVIDERS_") {
                let rest = variable.dropFirst("BROKER_PROVIDERS_".count).lowercased()
                // The longest matching id wins, so that an id that prefixes another cannot capture its keys.
                let matching = knownProviders.filter {
                    rest.hasPrefix($0.rawValue.replacing("-", with: "_") + "_")
                }
                guard let provider = matching.max(by: { $0.rawValue.count < $1.rawValue.count }) else {
                    throw ConfigurationError(source: "environment", key: variable, problem: "unknown provider")
                }
                let key = String(rest.dropFirst(provider.rawValue.count + 1))
                try setProviderKey(
                    provider, key, value: Self.environmentValue(text), source: "environment", name: variable)
                if provider == .custom {
                    customEnabled = providers[.custom]?["enabled"]?.boolValue ?? customEnabled
                    providers[.custom] = nil
                }
            }
        }
    }

    /// Environment values are text; numbers and booleans are recognised so that typed keys can be set.
    static func environmentValue(_ text: String) -> JSONValue {
        if let number = Int64(text) { return .int(number) }
        if text == "true" { return .bool(true) }
        if text == "false" { return .bool(false) }
        return .string(text)
    }

    private mutating func setServerKey(
        _ key: String,
        value: JSONValue,
        source: String,
        name: String
    ) throws(ConfigurationError) {
        func string() throws(ConfigurationError) -> String {
            guard case .string(let text) = value, !text.isEmpty else {
                throw ConfigurationError(source: source, key: name, problem: "must be a non-empty string")
            }
            return text
        }
        func integer() throws(ConfigurationError) -> Int64 {
            guard case .int(let number) = value else {
                throw ConfigurationError(source: source, key: name, problem: "must be an integer")
            }
            return number
        }
        /// An integer within `range`; the error names the range (and `unit` when given).
        func integer(in range: ClosedRange<Int64>, unit: String = "") throws(ConfigurationError) -> Int64 {
            let number = try integer()
            guard range.contains(number) else {
                throw ConfigurationError(
                    source: source, key: name,
                    problem:
                        "must be between \(range.lowerBound) and \(range.upperBound)\(unit.isEmpty ? "" : " " + unit)")
            }
            return number
        }
        func boolean() throws(ConfigurationError) -> Bool {
            guard case .bool(let flag) = value else {
                throw ConfigurationError(source: source, key: name, problem: "must be true or false")
            }
            return flag
        }
        /// A list of strings each `element` reads (`nil`: not one), or from the environment the same comma-separated;
        /// the error says `problem` and names the first entry that is not one.
        func list<T>(_ problem: String, _ element: (String) -> T?) throws(ConfigurationError) -> [T] {
            let items: [JSONValue]
            switch value {
            case .array(let entries): items = entries
            case .string(let text):
                items = text.split(separator: ",").map { .string(String($0).filter { $0 != " " }) }
            default: throw ConfigurationError(source: source, key: name, problem: problem)
            }
            var read: [T] = []
            for item in items {
                guard case .string(let text) = item, let entry = element(text) else {
                    throw ConfigurationError(
                        source: source, key: name, problem: problem + "; \(item.serialized()) is not one")
                }
                read.append(entry)
            }
            return read
        }
        func portNumber() throws(ConfigurationError) -> Int {
            let number = try integer()
            guard (0...65535).contains(number) else {
                throw ConfigurationError(source: source, key: name, problem: "must be a port number 0–65535")
            }
            return Int(number)
        }
        switch key {
        case "host": host = try string()
        case "port": port = try portNumber()
        case "issuer": issuer = try string()
        case "data_dir": dataDirectory = try string()
        case "database": database = try string()
        case "signing_key_file": signingKeyFile = try string()
        case "master_key_file": masterKeyFile = try string()
        case "metrics_port": metricsPort = try portNumber()
        case "metrics_host":
            let text = try string()
            guard !text.isEmpty, text.utf8.count <= 253, !text.contains(where: { $0 == " " || $0 == "/" }) else {
                throw ConfigurationError(source: source, key: name, problem: "must be a host name or an IP address")
            }
            metricsHost = text
        case "metrics_token_file": metricsTokenFile = try string()
        case "audit_log": auditLog = try string()
        case "database_password_file": databasePasswordFile = try string()
        case "database_pool_size": databasePoolSize = Int(try integer(in: 1...1000))
        case "database_timeout": databaseTimeout = try integer(in: 1...300, unit: "seconds")
        case "audience": audience = try string()
        case "access_token_ttl": accessTokenTTL = try integer()
        case "refresh_token_ttl": refreshTokenTTL = try integer()
        case "mint_max_ttl": mintMaxTTL = try integer()
        case "login_throttle": loginThrottle = try boolean()
        case "audit_store": auditStore = try boolean()
        case "audit_retention": auditRetention = try integer(in: 3600...(100 * 365 * 86_400), unit: "seconds")
        case "require_verified_email": requireVerifiedEmail = try boolean()
        case "require_par": requirePAR = try boolean()
        case "require_mfa": requireMFA = try boolean()
        case "webauthn_rp_id":
            let id = try string().lowercased()
            if let problem = PasskeySettings.rpIDProblem(id) {
                throw ConfigurationError(source: source, key: name, problem: problem)
            }
            webAuthnRPID = id
        case "dpop_nonce": dpopNonce = try boolean()
        case "client_registration":
            guard let mode = ClientRegistration(rawValue: try string()) else {
                throw ConfigurationError(source: source, key: name, problem: "must be \"off\", \"token\" or \"open\"")
            }
            clientRegistration = mode
        case "enumeration_protection": enumerationProtection = try boolean()
        case "device_code_ttl": deviceCodeTTL = try integer(in: 5...86_400, unit: "seconds")
        case "device_poll_interval": devicePollInterval = try integer(in: 1...60, unit: "seconds")
        case "password_hash_workers", "password_hash_queue":
            let number = try integer(in: 1...1024)
            if key == "password_hash_workers" {
                passwordHashWorkers = Int(number)
            } else {
                passwordHashQueue = Int(number)
            }
        case "max_connections": maxConnections = Int(try integer(in: 1...1_000_000))
        case "browser_session_ttl": browserSessionTTL = try integer(in: 60...(30 * 86_400), unit: "seconds")
        case "max_connections_per_address": maxConnectionsPerAddress = Int(try integer(in: 1...1_000_000))
        case "trusted_proxies":
            trustedProxies = TrustedProxies(
                try list(
                    "must be a list of IP addresses or CIDR ranges, like [\"10.0.0.0/8\", \"::1\"]", IPNetwork.init))
        case "ca_file": caFile = try string()
        case "client_metadata_hosts":
            clientMetadataHosts = try list("must be a list of host names, like [\"apps.example.com\"]") { text in
                let isHost =
                    !text.isEmpty && text.utf8.count <= 253
                    && text.utf8.allSatisfy { byte in
                        (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x7A)
                            || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
                    }
                return isHost ? text.lowercased() : nil
            }
        case "registrations_per_hour": registrationsPerHour = Int(try integer(in: 1...1_000_000))
        case "request_timeout": requestTimeout = try integer(in: 1...3600, unit: "seconds")
        case "http_timeout": httpTimeout = try integer(in: 1...3600, unit: "seconds")
        default:
            throw ConfigurationError(source: source, key: name, problem: "unknown key")
        }
    }

    private mutating func setMailKey(_ key: String, value: JSONValue, source: String, name: String)
        throws(ConfigurationError)
    {
        guard MailConfiguration.keys.contains(key) else {
            let known = MailConfiguration.keys.sorted().joined(separator: ", ")
            throw ConfigurationError(source: source, key: name, problem: "unknown key (known: \(known))")
        }
        var section = mail ?? MailConfiguration()
        if key == "max_attempts" {
            guard case .int(let number) = value, (1...20).contains(number) else {
                throw ConfigurationError(source: source, key: name, problem: "must be an integer between 1 and 20")
            }
            section.maxAttempts = Int(number)
        } else {
            guard case .string(let text) = value, !text.isEmpty else {
                throw ConfigurationError(source: source, key: name, problem: "must be a non-empty string")
            }
            switch key {
            case "url": section.url = text
            case "from": section.from = text
            case "username": section.username = text
            case "password_file": section.passwordFile = text
            case "ca_file": section.caFile = text
            default: section.templatesDirectory = text
            }
        }
        mail = section
    }

    private mutating func setProviderKey(
        _ provider: ProviderID,
        _ key: String,
        value: JSONValue,
        source: String,
        name: String
    ) throws(ConfigurationError) {
        if provider == .custom {
            guard key == "enabled" else {
                throw ConfigurationError(source: source, key: name, problem: "unknown key (known: enabled)")
            }
            guard case .bool = value else {
                throw ConfigurationError(source: source, key: name, problem: "must be true or false")
            }
        } else {
            guard let schema = schema(provider), let accepted = schema.key(key) else {
                let known = schema(provider)?.keys.map(\.name).sorted().joined(separator: ", ") ?? ""
                throw ConfigurationError(source: source, key: name, problem: "unknown key (known: \(known))")
            }
            var value = value
            if case .list = accepted.kind, source == "environment", let text = value.stringValue {
                // The environment's text: words separated by commas or spaces.
                value = .array(
                    text.split(whereSeparator: { $0 == "," || $0 == " " }).map { JSONValue.string(String($0)) })
            }
            if let problem = accepted.problem(with: value) {
                throw ConfigurationError(source: source, key: name, problem: problem)
            }
            providers[provider, default: [:]][key] = value
            return
        }
        providers[provider, default: [:]][key] = value
    }

    /// Checks values that depend on each other or on ranges.
    package func validate(source: String) throws(ConfigurationError) {
        for (key, value) in [
            ("server.access_token_ttl", accessTokenTTL), ("server.refresh_token_ttl", refreshTokenTTL),
            ("server.mint_max_ttl", mintMaxTTL),
        ] where value < Self.minimumTTL {
            throw ConfigurationError(
                source: source,
                key: key,
                problem: "must be at least \(Self.minimumTTL) seconds (got \(value))"
            )
        }
        if let issuer {
            let lower = issuer.lowercased()
            guard lower.hasPrefix("http://") || lower.hasPrefix("https://"), !issuer.contains("?"),
                !issuer.contains("#")
            else {
                throw ConfigurationError(
                    source: source,
                    key: "server.issuer",
                    problem: "must be an http(s) URL without query or fragment"
                )
            }
        }
        if let database {
            do {
                _ = try DatabaseLocation.parse(database)
            } catch {
                throw ConfigurationError(source: source, key: "server.database", problem: error.description)
            }
        }
        if let mail {
            guard !mail.url.isEmpty else {
                throw ConfigurationError(source: source, key: "mail.url", problem: "is required in a mail section")
            }
            if let problem = MailSyntax.urlProblem(mail.url) {
                throw ConfigurationError(source: source, key: "mail.url", problem: problem)
            }
            guard MailSyntax.address(mail.from) != nil else {
                throw ConfigurationError(
                    source: source, key: "mail.from",
                    problem: "must be an address like broker@example.com or \"Broker <broker@example.com>\"")
            }
        }
        if enumerationProtection && mail == nil && customEnabled {
            throw ConfigurationError(
                source: source, key: "server.enumeration_protection",
                problem: "needs a mail section: the answer to a registration is the mail that follows it")
        }
        if requireVerifiedEmail && mail == nil && customEnabled {
            throw ConfigurationError(
                source: source, key: "server.require_verified_email",
                problem: "needs a mail section: without mail no address can be verified")
        }
        for id in enabledProviders where id != .custom {
            guard let schema = schema(id) else { continue }
            if let (key, problem) = schema.check(ProviderSection(id: id, values: providers[id] ?? [:])) {
                throw ConfigurationError(source: source, key: "providers.\(id).\(key)", problem: problem)
            }
        }
    }
}
