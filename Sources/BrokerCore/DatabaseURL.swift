/// Where a broker's store is: `sqlite:PATH`, or `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=…]`
/// (`postgresql://` too).
package enum DatabaseLocation: Sendable, Equatable {
    case sqlite(path: String)
    case postgres(PostgresLocation)

    package struct Failure: Error, Sendable, CustomStringConvertible {
        package let description: String
    }

    /// Parses a `--database` value; errors say what is wrong without echoing a password.
    package static func parse(_ text: String) throws(Failure) -> DatabaseLocation {
        let lower = text.lowercased()
        if lower.hasPrefix("sqlite:") {
            var path = String(text.dropFirst("sqlite:".count))
            if path.hasPrefix("//") { path = String(path.dropFirst(2)) }
            guard !path.isEmpty else { throw Failure(description: "sqlite: needs a path (sqlite:/var/lib/broker.db)") }
            return .sqlite(path: path)
        }
        for scheme in ["postgres://", "postgresql://"] where lower.hasPrefix(scheme) {
            return .postgres(try PostgresLocation.parse(String(text.dropFirst(scheme.count))))
        }
        throw Failure(description: "the database URL must start with postgres://, postgresql:// or sqlite:")
    }
}

/// A PostgreSQL server and database, parsed from a URL.
package struct PostgresLocation: Sendable, Equatable, CustomStringConvertible {
    /// `sslmode`: `disable`, or TLS that verifies the server's certificate and name against the system's
    /// trust store. `require` is read as `verify-full`: this broker never talks TLS to a server it has not
    /// verified (there is no setting that turns verification off).
    package enum TLSMode: String, Sendable {
        case disable
        case verifyFull = "verify-full"
    }

    package var host: String
    package var port: Int
    package var user: String
    package var database: String
    /// A password written in the URL (works, but is warned about: URLs end up in shell history and `ps`).
    package var passwordInURL: String?
    package var tls: TLSMode

    /// `postgres://user@host:port/db` — never the password.
    package var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "postgres://\(user)@\(shownHost):\(port)/\(database)"
    }

    /// `host:port`, for error messages.
    package var address: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    static func parse(_ rest: String) throws(DatabaseLocation.Failure) -> PostgresLocation {
        var remainder = Substring(rest)
        var query = Substring("")
        if let mark = remainder.firstIndex(of: "?") {
            query = remainder[remainder.index(after: mark)...]
            remainder = remainder[..<mark]
        }
        guard let slash = remainder.firstIndex(of: "/") else {
            throw DatabaseLocation.Failure(description: "the PostgreSQL URL needs a database name (…/DBNAME)")
        }
        let authority = remainder[..<slash]
        let database = try decode(remainder[remainder.index(after: slash)...], "database name")
        guard !database.isEmpty, !database.contains("/") else {
            throw DatabaseLocation.Failure(description: "the PostgreSQL URL needs one database name after the host")
        }
        var user = ""
        var password: String?
        var hostPort = authority
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            hostPort = authority[authority.index(after: at)...]
            if let colon = userInfo.firstIndex(of: ":") {
                user = try decode(userInfo[..<colon], "user name")
                password = try decode(userInfo[userInfo.index(after: colon)...], "password")
            } else {
                user = try decode(userInfo, "user name")
            }
        }
        guard !user.isEmpty else {
            throw DatabaseLocation.Failure(description: "the PostgreSQL URL needs a user (postgres://USER@HOST/DB)")
        }
        var host: Substring
        var port = 5432
        if hostPort.hasPrefix("[") {
            guard let close = hostPort.firstIndex(of: "]") else {
                throw DatabaseLocation.Failure(description: "unclosed [ in the PostgreSQL host")
            }
            host = hostPort[hostPort.index(after: hostPort.startIndex)..<close]
            let after = hostPort[hostPort.index(after: close)...]
            if after.hasPrefix(":") {
                port = try parsePort(after.dropFirst())
            } else if !after.isEmpty {
                throw DatabaseLocation.Failure(description: "unexpected text after the PostgreSQL host")
            }
        } else if let colon = hostPort.lastIndex(of: ":") {
            host = hostPort[..<colon]
            port = try parsePort(hostPort[hostPort.index(after: colon)...])
        } else {
            host = hostPort
        }
        guard !host.isEmpty, host.allSatisfy({ $0.isLetter || $0.isNumber || ".-_:".contains($0) }) else {
            throw DatabaseLocation.Failure(description: "the PostgreSQL URL needs a host name or address")
        }
        var tls: TLSMode = isLoopback(String(host)) ? .disable : .verifyFull
        for pair in query.split(separator: "&") where !pair.isEmpty {
            let parts = pair.split(separator: "=", maxSplits: 1)
            let name = String(parts[0])
            let value = parts.count > 1 ? String(parts[1]) : ""
            switch name {
            case "sslmode":
                switch value {
                case "disable": tls = .disable
                case "require", "verify-full": tls = .verifyFull
                default:
                    throw DatabaseLocation.Failure(
                        description: "sslmode must be disable, require or verify-full (both verify the server)")
                }
            default:
                throw DatabaseLocation.Failure(description: "unknown PostgreSQL URL parameter \(name) (only sslmode)")
            }
        }
        return PostgresLocation(
            host: String(host), port: port, user: user, database: database, passwordInURL: password, tls: tls)
    }

    private static func parsePort(_ text: Substring) throws(DatabaseLocation.Failure) -> Int {
        guard let port = Int(text), (1...65535).contains(port) else {
            throw DatabaseLocation.Failure(description: "the PostgreSQL port must be 1–65535")
        }
        return port
    }

    /// ``LoopbackHost``: before, any name starting with `127.` (a DNS name such as `127.example.com`) counted
    /// as this machine and got no TLS by default.
    static func isLoopback(_ host: String) -> Bool { LoopbackHost.contains(host) }

    /// Percent-decoding of one URL component (the form decoder's, with `+` kept as it is).
    private static func decode(_ text: Substring, _ what: String) throws(DatabaseLocation.Failure) -> String {
        guard let decoded = FormEncoding.percentDecode(text, plusIsSpace: false) else {
            throw DatabaseLocation.Failure(
                description: "bad %-escape or text that is not UTF-8 in the PostgreSQL \(what)")
        }
        return decoded
    }
}
