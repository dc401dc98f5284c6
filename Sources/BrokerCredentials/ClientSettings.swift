package import BrokerCore
import BrokerSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where the client keeps its files and which broker and profile a command talks about.
///
/// Precedence (CONTRACT.md): `--broker` over `BROKER_URL` over `broker_url` in `$BROKER_HOME/config.json`
/// over `http://127.0.0.1:8787`; `--profile` over `BROKER_PROFILE` over `default`.
package struct ClientSettings: Sendable {
    package let home: String
    package let key: SessionKey

    package static let defaultBrokerURL = "http://127.0.0.1:8787"

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
        let configured = file.brokerURL
        let url: String
        let source: String
        if let broker {
            (url, source) = (broker, "--broker")
        } else if let value = environment["BROKER_URL"], !value.isEmpty {
            (url, source) = (value, "BROKER_URL")
        } else if let configured {
            (url, source) = (configured, "broker_url in \(home)/config.json")
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
        let name = profile ?? environment["BROKER_PROFILE"].flatMap { $0.isEmpty ? nil : $0 } ?? "default"
        guard Self.isValidProfile(name) else {
            throw Problem("profile \"\(name)\": use letters, digits, '.', '_' or '-' (at most 64)", isUsage: true)
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

    /// The client's config file (`$BROKER_HOME/config.json`): `broker_url`, and `insecure_http` (allow plain
    /// http to a broker that is not on this machine).
    package struct ConfigFile: Equatable {
        package var brokerURL: String?
        package var insecureHTTP = false
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
        if host == "localhost" || host == "[::1]" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets[0] == "127"
            && octets.allSatisfy { $0.isASCIIDigits && $0.utf8.count <= 3 && (Int($0) ?? 256) < 256 }
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
        for key in fields.keys.sorted() where key != "broker_url" && key != "insecure_http" {
            throw Problem(
                "\(path): unknown key \"\(key)\" (the client config knows \"broker_url\" and \"insecure_http\")")
        }
        var file = ConfigFile()
        switch fields["broker_url"] {
        case nil: break
        case .string(let url)?: file.brokerURL = url
        default: throw Problem("\(path): \"broker_url\" must be a string")
        }
        switch fields["insecure_http"] {
        case nil: break
        case .bool(let flag)?: file.insecureHTTP = flag
        default: throw Problem("\(path): \"insecure_http\" must be true or false")
        }
        return file
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
                (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                    || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
            }
    }
}
