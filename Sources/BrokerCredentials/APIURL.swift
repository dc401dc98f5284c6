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
    /// An API that checks DPoP proofs (`{"url": …, "dpop": true}` in `api_urls`): `broker request` sends a bound
    /// token there as `Authorization: DPoP` with a proof.
    package var dpop = false
    /// The API's resource indicator (`{"url": …, "resource": URL}` in `api_urls`, RFC 8707): the CLI sends this
    /// API a token whose `aud` is that URL, got from the broker for it, instead of the session's own.
    package var resource: String?

    /// Parses `scheme://[user@]host[:port][/path][?query][#fragment]`; `nil` unless http or https with a
    /// host, a valid port, and a path no server reads as leaving where it is written (`pathStaysPut`): a
    /// server resolves dot segments, so `/v1/../admin` would leave the listed prefix after the check.
    ///
    /// Read as UTF-8 bytes, as a server and curl read it, never as `Character`s: a combining mark or a prepended
    /// character joins the delimiter beside it into one grapheme, so `?` + U+0301 would not end the path and
    /// U+070F + `/` would not start a segment.
    package init?(_ text: String) {
        let bytes = Array(text.utf8)
        let start: Int
        if Self.hasSchemePrefix(bytes, "https://") {
            scheme = "https"
            start = 8
        } else if Self.hasSchemePrefix(bytes, "http://") {
            scheme = "http"
            start = 7
        } else {
            return nil
        }
        let rest = bytes[start...]
        guard !rest.contains(where: { $0 <= 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "\\") }) else { return nil }
        let authorityEnd =
            rest.firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }
            ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        if let at = authority.lastIndex(of: UInt8(ascii: "@")) { authority = authority[(at + 1)...] }
        let hostPart: ArraySlice<UInt8>
        var portPart: ArraySlice<UInt8>?
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            hostPart = authority[...close]
            let after = authority[(close + 1)...]
            if !after.isEmpty {
                guard after.first == UInt8(ascii: ":") else { return nil }
                portPart = after.dropFirst()
            }
        } else if let colon = authority.firstIndex(of: UInt8(ascii: ":")) {
            hostPart = authority[..<colon]
            portPart = authority[(colon + 1)...]
        } else {
            hostPart = authority
        }
        guard Self.isHost(hostPart) else { return nil }
        // ASCII only (isHost), so lowercasing stays within ASCII.
        host = String(decoding: hostPart, as: UTF8.self).lowercased()
        if let portPart {
            let portText = String(decoding: portPart, as: UTF8.self)
            guard portText.isASCIIDigits, portPart.count <= 5, let number = Int(portText), (1...65535).contains(number)
            else { return nil }
            port = number
        } else {
            port = scheme == "https" ? 443 : 80
        }
        let pathBytes = rest[authorityEnd...].prefix { $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") }
        guard Self.pathStaysPut(pathBytes) else { return nil }
        path = String(decoding: pathBytes, as: UTF8.self)
    }

    /// Whether `bytes` open with `prefix` (lowercase ASCII), in any case.
    private static func hasSchemePrefix(_ bytes: [UInt8], _ prefix: StaticString) -> Bool {
        let expected = prefix.withUTF8Buffer { Array($0) }
        guard bytes.count >= expected.count else { return false }
        return zip(bytes, expected).allSatisfy { byte, wanted in
            byte == wanted || (byte >= 0x41 && byte <= 0x5A && byte | 0x20 == wanted)
        }
    }

    /// Whether no server could read `path` as leaving where it is written. Servers disagree on what a path
    /// means (attack review RT2-11): some decode `%2f` and `%5c` into separators, read `\` as `/`, or drop a
    /// `;parameter` before resolving (`..;/` is `../` to Tomcat). So the check is made on the widest reading:
    /// the path percent-decoded once, split at `/` and `\`, each segment cut at `;`; no segment may then be
    /// `.` or `..`; and `%25` (a second decoding would find more) or a broken escape is refused outright.
    static func pathStaysPut(_ path: ArraySlice<UInt8>) -> Bool {
        var decoded: [UInt8] = []
        var bytes = path
        while let byte = bytes.popFirst() {
            guard byte == UInt8(ascii: "%") else {
                decoded.append(byte)
                continue
            }
            guard let high = bytes.popFirst()?.asciiHexValue, let low = bytes.popFirst()?.asciiHexValue
            else { return false }
            let value = high << 4 | low
            // A byte that decodes to %, or a NUL: a second decoding or a C string would read something else.
            guard value != UInt8(ascii: "%"), value != 0 else { return false }
            decoded.append(value)
        }
        let separators: Set<UInt8> = [UInt8(ascii: "/"), UInt8(ascii: "\\")]
        for segment in decoded.split(omittingEmptySubsequences: false, whereSeparator: separators.contains) {
            let name = segment.prefix { $0 != UInt8(ascii: ";") }
            if name.elementsEqual(".".utf8) || name.elementsEqual("..".utf8) { return false }
        }
        return true
    }

    /// A host as DNS and IP literals write it: letters, digits, `-`, `.` and `_`, or an IPv6 literal in
    /// brackets (hex digits, `:` and `.`). Nothing a resolver, a proxy or git could read as something else —
    /// no percent-encoding, no zone, no `%`, `\`, `;` or `,`.
    static func isHost(_ text: ArraySlice<UInt8>) -> Bool {
        guard !text.isEmpty, text.count <= 253 else { return false }
        if text.first == UInt8(ascii: "[") {
            guard text.last == UInt8(ascii: "]"), text.count > 2 else { return false }
            let inside = text.dropFirst().dropLast()
            return inside.allSatisfy { byte in
                byte.asciiHexValue != nil || byte == UInt8(ascii: ":") || byte == UInt8(ascii: ".")
            } && inside.contains(UInt8(ascii: ":"))
        }
        return text.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x7A)
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_")
        }
    }

    /// `host` or `host:port` exactly as git's `host=` line may carry it (git-credential(1)), by the same rules as
    /// the host of a URL; `nil` for anything else.
    package static func authority(_ text: String, scheme: String) -> APIURL? {
        guard !text.utf8.contains(where: { "/?#@".utf8.contains($0) }), let url = APIURL(scheme + "://" + text),
            url.path.isEmpty
        else { return nil }
        return url
    }

    /// Whether this is this machine: `localhost`, 127.0.0.0/8 or `[::1]`.
    package var isLoopback: Bool { LoopbackHost.contains(host) }

    /// Whether a bearer token may cross the network to this URL at all: https, or http on this machine.
    package var carriesTokensSafely: Bool { scheme == "https" || isLoopback }

    /// `scheme://host[:port]`: what a redirect must keep for the token to follow it (RFC 6454 origin).
    package var origin: String {
        let defaultPort = scheme == "https" ? 443 : 80
        return scheme + "://" + host + (port == defaultPort ? "" : ":\(port)")
    }

    /// Whether `other` lies under this listed URL: same origin, and this path (without a trailing `/`) is
    /// empty, equal to `other`'s, or followed in `other`'s by `/`. Byte for byte: `String`'s own comparison
    /// takes canonically equivalent text as equal (`é` and `e` + U+0301), which a server does not.
    package func covers(_ other: APIURL) -> Bool {
        guard scheme == other.scheme, host == other.host, port == other.port else { return false }
        var prefix = path.utf8[...]
        while prefix.last == UInt8(ascii: "/") { prefix = prefix.dropLast() }
        if prefix.isEmpty { return true }
        guard other.path.utf8.starts(with: prefix) else { return false }
        let after = other.path.utf8.dropFirst(prefix.count)
        return after.isEmpty || after.first == UInt8(ascii: "/")
    }

    /// The same URL byte for byte (the synthesized `==` would compare paths as `String`s do: up to canonical
    /// equivalence).
    package static func == (lhs: APIURL, rhs: APIURL) -> Bool {
        lhs.scheme == rhs.scheme && lhs.host == rhs.host && lhs.port == rhs.port && lhs.dpop == rhs.dpop
            && lhs.resource == rhs.resource && lhs.path.utf8.elementsEqual(rhs.path.utf8)
    }

    package var description: String { origin + path }
}
