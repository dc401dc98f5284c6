package import BrokerCore
import BrokerSystem
import Glibc

/// Where a profile's long-lived secrets (refresh token, DPoP key) are kept (issue "Keyring").
package enum CredentialStore: String, Sendable, CaseIterable {
    /// The desktop keyring when it answers and is unlocked, else the file — with a notice, never silently.
    case auto
    /// The desktop keyring; without one, commands fail and say so.
    case keyring
    /// `credentials.json` (0600) and `keys/` (0700), as before.
    case file

    static var choices: String { allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ") }
}

/// Where the client keeps its files and which broker and profile a command talks about.
///
/// Precedence (CONTRACT.md): `--broker` over `BROKER_URL` over `broker_url` in `$BROKER_HOME/config.json`
/// over `http://127.0.0.1:8787`; `--profile` over `BROKER_PROFILE` over `default`. The wait for each answer from the
/// broker: `BROKER_HTTP_TIMEOUT` over `http_timeout` in the config file (the profile's over the top-level one) over
/// 30 seconds.
package struct ClientSettings: Sendable {
    package let home: String
    package let key: SessionKey
    /// Where this profile's token may be sent (`api_urls` in the config file, the profile's own list over the
    /// top-level one); `nil` when neither lists any: then any https URL, or http on this machine.
    package let apiURLs: [APIURL]?
    /// How long a command waits for each answer from the broker (password checks get at least two minutes).
    package let requestTimeout: Duration
    /// Whether the CLI binds this profile's sessions to a DPoP key of its own (`dpop` in the config file, the
    /// profile's over the top-level one; default true).
    package let dpop: Bool
    /// Where this profile's long-lived secrets go (`BROKER_CREDENTIAL_STORE` over `credential_store` in the
    /// config file, the profile's over the top-level one; default `auto`).
    package let credentialStore: CredentialStore
    /// This process's environment (the keyring client finds the session bus in it).
    package let environment: [String: String]
    /// This command may show the desktop keyring's unlock prompt: `broker login` and `register` on a terminal.
    /// Every other command gets an answer from the keyring within two seconds, or fails.
    package var keyringMayPrompt = false
    /// This command signs in (`login`, `register`): the keyring may take longer to open than the two seconds
    /// every other command allows it.
    package var signingIn = false

    package static let defaultBrokerURL = "http://127.0.0.1:8787"
    package static let defaultRequestTimeout: Duration = .seconds(30)
    /// `http_timeout` and `BROKER_HTTP_TIMEOUT` are whole seconds in this range.
    package static let requestTimeoutRange: ClosedRange<Int64> = 1...3600
    /// What a bad value is told it should be (the variable's and the file's messages alike).
    static var requestTimeoutRule: String {
        "a whole number of seconds from \(requestTimeoutRange.lowerBound) to \(requestTimeoutRange.upperBound)"
    }

    /// A setting that cannot be used, named with where it came from.
    package struct Problem: Error, Sendable, CustomStringConvertible {
        package let description: String
        /// A bad flag or environment value (usage error) rather than a bad config file.
        package let isUsage: Bool
        package init(_ description: String, isUsage: Bool = false) {
            self.description = description
            self.isUsage = isUsage
        }
    }

    package init(
        broker: String?,
        profile: String?,
        environment: [String: String]
    ) throws(Problem) {
        home = Self.home(environment: environment)
        let file = try Self.configFile(home: home)
        let name = profile ?? environment["BROKER_PROFILE"].flatMap { $0.isEmpty ? nil : $0 } ?? "default"
        guard Self.isValidProfile(name) else {
            throw Problem("profile \"\(name)\": use letters, digits, '.', '_' or '-' (at most 64)", isUsage: true)
        }
        let section = file.profiles[name]
        let configured = section?.brokerURL ?? file.brokerURL
        let configuredSource =
            section?.brokerURL != nil
            ? "profiles.\(name).broker_url in \(home)/config.json" : "broker_url in \(home)/config.json"
        apiURLs = section?.apiURLs ?? file.apiURLs
        dpop = section?.dpop ?? file.dpop ?? true
        self.environment = environment
        if let text = environment["BROKER_CREDENTIAL_STORE"], !text.isEmpty {
            guard let chosen = CredentialStore(rawValue: text) else {
                throw Problem(
                    "BROKER_CREDENTIAL_STORE: \"\(text.prefix(64))\" is not one of \(CredentialStore.choices)",
                    isUsage: true)
            }
            credentialStore = chosen
        } else {
            credentialStore = section?.credentialStore ?? file.credentialStore ?? .auto
        }
        if let text = environment["BROKER_HTTP_TIMEOUT"], !text.isEmpty {
            guard text.utf8.count <= 4, text.isASCIIDigits, let seconds = Int64(text),
                Self.requestTimeoutRange.contains(seconds)
            else {
                throw Problem("BROKER_HTTP_TIMEOUT: \"\(text)\" is not \(Self.requestTimeoutRule)", isUsage: true)
            }
            requestTimeout = .seconds(seconds)
        } else {
            let configuredTimeout = section?.httpTimeout ?? file.httpTimeout
            requestTimeout = configuredTimeout.map { .seconds($0) } ?? Self.defaultRequestTimeout
        }
        let url: String
        let source: String
        if let broker {
            (url, source) = (broker, "--broker")
        } else if let value = environment["BROKER_URL"], !value.isEmpty {
            (url, source) = (value, "BROKER_URL")
        } else if let configured {
            (url, source) = (configured, configuredSource)
        } else {
            (url, source) = (Self.defaultBrokerURL, "the default")
        }
        guard let normalized = Self.normalize(url) else {
            throw Problem(
                "\(source): \"\(url)\" is not an http(s) URL like https://broker.example.com",
                isUsage: source == "--broker" || source == "BROKER_URL"
            )
        }
        if normalized.hasPrefix("http://"), !Self.isLoopback(normalized), !file.insecureHTTP {
            throw Problem(
                "\(source): \(normalized) is plain http to another machine: passwords and tokens would cross the "
                    + "network readable by anyone on the way; use https, or set \"insecure_http\": true in "
                    + "\(home)/config.json if you really mean it",
                isUsage: source == "--broker" || source == "BROKER_URL"
            )
        }
        key = SessionKey(brokerURL: normalized, profile: name)
    }

    package var cache: FileTokenCache { FileTokenCache(directory: home) }

    /// This process's environment (`environ`), without Foundation.
    package static var processEnvironment: [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            pointer += 1
        }
        return result
    }

    /// `$BROKER_HOME`, else `$XDG_CONFIG_HOME/broker`, else `~/.config/broker`.
    package static func home(environment: [String: String]) -> String {
        if let home = environment["BROKER_HOME"], !home.isEmpty { return PosixFile.expandingTilde(home) }
        if let xdg = environment["XDG_CONFIG_HOME"], xdg.hasPrefix("/") { return xdg + "/broker" }
        let userHome = environment["HOME"] ?? "~"
        return userHome + "/.config/broker"
    }

    /// The client's config file (`$BROKER_HOME/config.json`): `broker_url`; `insecure_http` (allow plain
    /// http to a broker that is not on this machine); `api_urls`, where tokens may be sent; `http_timeout`, the
    /// seconds to wait for each answer from the broker; and `profiles`, each profile's own `broker_url`,
    /// `api_urls` and `http_timeout`, which replace the top-level ones for that profile:
    ///
    ///     {"broker_url": "https://broker.example.com", "api_urls": ["https://api.example.com/v1"],
    ///      "profiles": {"staging": {"broker_url": "https://broker.staging.example.com", "http_timeout": 90,
    ///                               "api_urls": ["https://api.staging.example.com", "https://git.example.com"]}}}
    package struct ConfigFile: Equatable {
        package var brokerURL: String?
        package var insecureHTTP = false
        package var apiURLs: [APIURL]?
        package var httpTimeout: Int64?
        package var dpop: Bool?
        package var credentialStore: CredentialStore?
        package var profiles: [String: Profile] = [:]
    }

    /// One entry of `profiles` in the client's config file.
    package struct Profile: Equatable {
        package var brokerURL: String?
        package var apiURLs: [APIURL]?
        package var httpTimeout: Int64?
        package var dpop: Bool?
        package var credentialStore: CredentialStore?
    }

    /// Whether the token may go to `url` under these settings; `nil` if so, else why not (for a message).
    package func refusal(toSendTokenTo url: APIURL) -> String? {
        guard url.carriesTokensSafely else {
            return "\(url.origin) is plain http to another machine: the token would cross the network readable "
                + "by anyone on the way (use https)"
        }
        if let apiURLs, !apiURLs.contains(where: { $0.covers(url) }) {
            let listed = apiURLs.map(\.description).joined(separator: ", ")
            return "\(url) is not under the api_urls of profile \(key.profile) (\(listed)) in \(home)/config.json"
        }
        return nil
    }

    /// Whether a normalized `http://` URL's host is this machine (127.0.0.0/8, `localhost`, `[::1]`).
    static func isLoopback(_ url: String) -> Bool {
        let authority = url.drop { $0 != "/" }.dropFirst(2).prefix { $0 != "/" }
        let host: Substring
        if authority.hasPrefix("[") {
            host = authority.prefix { $0 != "]" } + "]"
        } else {
            host = authority.prefix { $0 != ":" }
        }
        return LoopbackHost.contains(host)
    }

    /// The client's config file; no file is fine, a bad one is an error naming it.
    static func configFile(home: String) throws(Problem) -> ConfigFile {
        let path = home + "/config.json"
        guard PosixFile.exists(path) else { return ConfigFile() }
        let bytes: [UInt8]
        do {
            bytes = try PosixFile.read(path: path, maxSize: 1024 * 1024)
        } catch {
            throw Problem("cannot read \(path): \(error.reason)")
        }
        return try configFile(bytes: bytes, path: path)
    }

    /// The client config file's contents read: a JSON object with the known keys only (`Fuzz/config`).
    package static func configFile(bytes: [UInt8], path: String) throws(Problem) -> ConfigFile {
        let document: JSONValue
        switch JSONValue.parseReportingError(bytes) {
        case .success(let value): document = value
        case .failure(let error): throw Problem("\(path) is not valid JSON: \(error)")
        }
        guard case .object(let fields) = document else { throw Problem("\(path): expected a JSON object") }
        let known = ["broker_url", "insecure_http", "api_urls", "http_timeout", "dpop", "credential_store", "profiles"]
        for key in fields.keys.sorted() where !known.contains(key) {
            throw Problem(
                "\(path): unknown key \"\(key)\" (the client config knows "
                    + known.map { "\"\($0)\"" }.joined(separator: ", ") + ")")
        }
        var file = ConfigFile()
        file.brokerURL = try string(fields["broker_url"], "broker_url", path: path)
        file.insecureHTTP = try flag(fields["insecure_http"], "insecure_http", path: path) ?? false
        file.apiURLs = try apiURLs(fields["api_urls"], "api_urls", path: path)
        file.httpTimeout = try seconds(fields["http_timeout"], "http_timeout", path: path)
        file.dpop = try flag(fields["dpop"], "dpop", path: path)
        file.credentialStore = try store(fields["credential_store"], "credential_store", path: path)
        switch fields["profiles"] {
        case nil: break
        case .object(let profiles)?:
            for (name, value) in profiles.sorted(by: { $0.key < $1.key }) {
                guard isValidProfile(name) else {
                    throw Problem(
                        "\(path): profile \"\(name)\": use letters, digits, '.', '_' or '-' (at most 64)")
                }
                guard case .object(let entry) = value else {
                    throw Problem("\(path): \"profiles.\(name)\" must be an object")
                }
                let profileKeys = ["broker_url", "api_urls", "http_timeout", "dpop", "credential_store"]
                for key in entry.keys.sorted() where !profileKeys.contains(key) {
                    throw Problem(
                        "\(path): unknown key \"profiles.\(name).\(key)\" (a profile knows \"broker_url\", "
                            + "\"api_urls\", \"http_timeout\", \"dpop\" and \"credential_store\")"
                    )
                }
                file.profiles[name] = Profile(
                    brokerURL: try string(entry["broker_url"], "profiles.\(name).broker_url", path: path),
                    apiURLs: try apiURLs(entry["api_urls"], "profiles.\(name).api_urls", path: path),
                    httpTimeout: try seconds(entry["http_timeout"], "profiles.\(name).http_timeout", path: path),
                    dpop: try flag(entry["dpop"], "profiles.\(name).dpop", path: path),
                    credentialStore: try store(
                        entry["credential_store"], "profiles.\(name).credential_store", path: path))
            }
        default: throw Problem("\(path): \"profiles\" must be an object of profile names")
        }
        return file
    }

    private static func store(_ value: JSONValue?, _ name: String, path: String) throws(Problem) -> CredentialStore? {
        switch value {
        case nil: return nil
        case .string(let text)?:
            guard let store = CredentialStore(rawValue: text) else {
                throw Problem(
                    "\(path): \"\(name)\" must be one of \(CredentialStore.choices), not \"\(text.prefix(64))\"")
            }
            return store
        default: throw Problem("\(path): \"\(name)\" must be one of \(CredentialStore.choices)")
        }
    }

    private static func flag(_ value: JSONValue?, _ name: String, path: String) throws(Problem) -> Bool? {
        switch value {
        case nil: return nil
        case .bool(let flag)?: return flag
        default: throw Problem("\(path): \"\(name)\" must be true or false")
        }
    }

    private static func string(_ value: JSONValue?, _ name: String, path: String) throws(Problem) -> String? {
        switch value {
        case nil: return nil
        case .string(let text)?: return text
        default: throw Problem("\(path): \"\(name)\" must be a string")
        }
    }

    /// Whole seconds in ``requestTimeoutRange``.
    private static func seconds(_ value: JSONValue?, _ name: String, path: String) throws(Problem) -> Int64? {
        switch value {
        case nil: return nil
        case .int(let seconds)? where requestTimeoutRange.contains(seconds): return seconds
        default: throw Problem("\(path): \"\(name)\" must be \(requestTimeoutRule)")
        }
    }

    /// A list of https URLs (http only to this machine), without query or fragment.
    private static func apiURLs(_ value: JSONValue?, _ name: String, path: String) throws(Problem) -> [APIURL]? {
        guard let value else { return nil }
        guard case .array(let items) = value else {
            throw Problem("\(path): \"\(name)\" must be a list of URLs like [\"https://api.example.com\"]")
        }
        var list: [APIURL] = []
        for item in items {
            // A URL, or {"url": URL, "dpop": true, "resource": URL}: an API that checks DPoP proofs (RFC 9449),
            // and the resource indicator its tokens are asked for with (RFC 8707).
            var entry = item
            var dpop = false
            var resource: String?
            if case .object(let members) = item {
                for key in members.keys.sorted() where !["url", "dpop", "resource"].contains(key) {
                    throw Problem(
                        "\(path): \"\(name)\": unknown key \"\(key)\" (an entry knows \"url\", \"dpop\" and \"resource\")"
                    )
                }
                guard let url = members["url"] else { throw Problem("\(path): \"\(name)\": an entry lacks \"url\"") }
                switch members["dpop"] {
                case nil: break
                case .bool(let flag)?: dpop = flag
                default: throw Problem("\(path): \"\(name)\": \"dpop\" must be true or false")
                }
                switch members["resource"] {
                case nil: break
                case .string(let text)? where isResourceIndicator(text): resource = text
                default:
                    throw Problem(
                        "\(path): \"\(name)\": \"resource\" must be the API's URL as the broker registered it "
                            + "(https, or http on this machine; no fragment)")
                }
                entry = url
            }
            guard case .string(let text) = entry, !text.contains("?"), !text.contains("#"),
                !text.contains("@"), var url = APIURL(text)
            else {
                throw Problem(
                    "\(path): \"\(name)\": \(entry.serialized()) is not an http(s) URL like https://api.example.com/v1 "
                        + "(no user, query, fragment or dot segments)")
            }
            url.dpop = dpop
            url.resource = resource
            guard url.carriesTokensSafely else {
                throw Problem(
                    "\(path): \"\(name)\": \(text) is plain http to another machine; tokens go only over https "
                        + "(or http on this machine)")
            }
            list.append(url)
        }
        return list
    }

    /// Whether `text` can name a resource (RFC 8707 §2): an absolute http(s) URL the token may travel to, no
    /// fragment, no user; the broker says whether it registered it.
    package static func isResourceIndicator(_ text: String) -> Bool {
        guard text.utf8.count <= 2048, !text.contains("#"), !text.contains("@"), let url = APIURL(text) else {
            return false
        }
        return url.carriesTokensSafely
    }

    /// `scheme://host[:port][/path]` with the trailing slash removed; `nil` unless http or https with a host.
    package static func normalize(_ url: String) -> String? {
        let trimmed = String(url.drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
        let lower = trimmed.lowercased()
        let scheme: String
        if lower.hasPrefix("https://") {
            scheme = "https://"
        } else if lower.hasPrefix("http://") {
            scheme = "http://"
        } else {
            return nil
        }
        var rest = Substring(trimmed.dropFirst(scheme.count))
        guard !rest.contains(where: { $0 == "?" || $0 == "#" || $0 == " " || $0 == "@" }) else { return nil }
        while rest.hasSuffix("/") { rest = rest.dropLast() }
        let host = rest.prefix { $0 != "/" }
        guard !host.isEmpty, !host.hasPrefix(":") else { return nil }
        return scheme + host.lowercased() + rest.dropFirst(host.count)
    }

    static func isValidProfile(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64
            && name.utf8.allSatisfy { byte in
                byte.isASCIIAlphanumeric || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_")
                    || byte == UInt8(ascii: "-")
            }
    }
}
