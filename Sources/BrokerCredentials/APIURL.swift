import BrokerCore

/// An http(s) URL taken apart for one question: may the session's token be sent there?
///
/// The rules the request cycle applies (issue "request cycle", CONTRACT.md `api_urls`): the token travels only
/// over https, or plain http to this machine; and when the profile lists `api_urls`, only to a URL under one of
/// them — same scheme, same host, same port, and a path equal to the listed one or below it at a `/`.
/// No Foundation (the launcher answers credential helpers with it).
package struct APIURL: Equatable, Sendable, CustomStringConvertible {
    package let scheme: String
    /// Lowercased; an IPv6 literal keeps its brackets.
    package let host: String
    package let port: Int
    /// The path as written (percent-encoding kept), `""` for none; never with `?` or `#`.
    package let path: String

    /// Parses `scheme://[user@]host[:port][/path][?query][#fragment]`; `nil` unless http or https with a
    /// host, a valid port, and no dot segments (`.`, `..`, or their encodings) in the path — a server
    /// resolves those, so `/v1/../admin` would leave the listed prefix after the check.
    package init?(_ text: String) {
        let lower = text.lowercased()
        let rest: Substring
        if lower.hasPrefix("https://") {
            scheme = "https"
            rest = text.dropFirst(8)
        } else if lower.hasPrefix("http://") {
            scheme = "http"
            rest = text.dropFirst(7)
        } else {
            return nil
        }
        guard !rest.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "\\") }) else { return nil }
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        var hostPart: Substring
        var portPart: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            hostPart = authority[...close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return nil }
                portPart = after.dropFirst()
            }
        } else if let colon = authority.firstIndex(of: ":") {
            hostPart = authority[..<colon]
            portPart = authority[authority.index(after: colon)...]
        } else {
            hostPart = authority
        }
        guard !hostPart.isEmpty else { return nil }
        host = hostPart.lowercased()
        if let portPart {
            guard portPart.isASCIIDigits, portPart.utf8.count <= 5, let number = Int(portPart),
                (1...65535).contains(number)
            else { return nil }
            port = number
        } else {
            port = scheme == "https" ? 443 : 80
        }
        let afterAuthority = rest[authorityEnd...]
        let pathText = afterAuthority.prefix { $0 != "?" && $0 != "#" }
        for segment in pathText.split(separator: "/", omittingEmptySubsequences: false)
        where Self.isDotSegment(segment) {
            return nil
        }
        path = String(pathText)
    }

    /// Whether this is this machine: `localhost`, 127.0.0.0/8 or `[::1]`.
    package var isLoopback: Bool {
        if host == "localhost" || host == "[::1]" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets[0] == "127"
            && octets.allSatisfy { $0.isASCIIDigits && $0.utf8.count <= 3 && (Int($0) ?? 256) < 256 }
    }

    /// Whether a bearer token may cross the network to this URL at all: https, or http on this machine.
    package var carriesTokensSafely: Bool { scheme == "https" || isLoopback }

    /// `scheme://host[:port]`: what a redirect must keep for the token to follow it (RFC 6454 origin).
    package var origin: String {
        let defaultPort = scheme == "https" ? 443 : 80
        return scheme + "://" + host + (port == defaultPort ? "" : ":\(port)")
    }

    /// Whether `other` lies under this listed URL: same origin, and this path (without a trailing `/`) is
    /// empty, equal to `other`'s, or followed in `other`'s by `/`.
    package func covers(_ other: APIURL) -> Bool {
        guard scheme == other.scheme, host == other.host, port == other.port else { return false }
        var prefix = Substring(path)
        while prefix.hasSuffix("/") { prefix = prefix.dropLast() }
        if prefix.isEmpty { return true }
        guard other.path.hasPrefix(prefix) else { return false }
        let after = other.path.dropFirst(prefix.count)
        return after.isEmpty || after.hasPrefix("/")
    }

    package var description: String { origin + path }

    /// `.` or `..`, each dot possibly written `%2e` / `%2E`.
    static func isDotSegment(_ segment: Substring) -> Bool {
        var dots = 0
        var rest = Substring(segment.lowercased())
        while !rest.isEmpty {
            if rest.hasPrefix(".") {
                rest = rest.dropFirst()
            } else if rest.hasPrefix("%2e") {
                rest = rest.dropFirst(3)
            } else {
                return false
            }
            dots += 1
        }
        return dots == 1 || dots == 2
    }
}
