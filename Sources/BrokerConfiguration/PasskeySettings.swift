import BrokerCore

/// Whether passkeys are on for a broker, and for which relying-party id and origin (issue "Passkeys").
///
/// The relying-party id is `server.webauthn_rp_id`, else the issuer's host. Browsers refuse an IP address as
/// one (Chromium: "This is an invalid domain"), so a broker on `http://127.0.0.1:…` without the key has
/// passkeys off, and says so at start with the key to set. `localhost` and real domains work; the issuer's host
/// must be the id or a subdomain of it (WebAuthn §5.1.4.1), and the origin is the issuer's scheme, host and port.
package enum PasskeySettings: Sendable, Equatable {
    case on(rpID: String, origin: String)
    case off(reason: String)

    package var isOn: Bool {
        if case .on = self { return true }
        return false
    }

    /// The settings for a broker reached at `issuer` with `configured` as its relying-party id.
    package static func resolve(issuer: String, configured: String?) -> PasskeySettings {
        guard let (origin, host) = originAndHost(issuer) else {
            return .off(reason: "the issuer \(issuer) is not an http(s) URL")
        }
        let id = configured ?? host
        if configured == nil, isIPAddress(host) {
            return .off(
                reason:
                    "passkeys are off: the issuer's host \(host) is an IP address, which browsers refuse as a "
                    + "WebAuthn relying-party id; reach the broker by a name (e.g. http://localhost:PORT as "
                    + "server.issuer) or set server.webauthn_rp_id to turn them on")
        }
        guard host == id || host.hasSuffix("." + id) else {
            return .off(
                reason:
                    "passkeys are off: server.webauthn_rp_id \(id) is not the issuer's host \(host) or a parent "
                    + "domain of it, so no browser would make passkeys for it at \(origin)")
        }
        return .on(rpID: id, origin: origin)
    }

    /// Why `id` cannot be a relying-party id; `nil` when it can.
    package static func rpIDProblem(_ id: String) -> String? {
        if isIPAddress(id) { return "must be a domain name, not an IP address (browsers refuse those for passkeys)" }
        let labels = id.split(separator: ".", omittingEmptySubsequences: false)
        let wellFormed =
            id.utf8.count <= 253
            && labels.allSatisfy { label in
                !label.isEmpty && label.utf8.count <= 63 && label.first != "-" && label.last != "-"
                    && label.utf8.allSatisfy { $0.isASCIILowercase || $0.isASCIIDigit || $0 == UInt8(ascii: "-") }
            }
        return wellFormed ? nil : "must be a host name such as example.com or localhost"
    }

    /// The origin (`scheme://host[:port]`, lower case, default ports dropped) and host of an issuer URL.
    static func originAndHost(_ issuer: String) -> (origin: String, host: String)? {
        let lower = issuer.lowercased()
        let scheme: String
        if lower.hasPrefix("https://") {
            scheme = "https"
        } else if lower.hasPrefix("http://") {
            scheme = "http"
        } else {
            return nil
        }
        let rest = lower.dropFirst(scheme.count + 3)
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard !authority.isEmpty, !authority.contains("@") else { return nil }
        var host = String(authority)
        var port: String?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = String(authority[...close])
            let after = authority[authority.index(after: close)...]
            if after.hasPrefix(":") { port = String(after.dropFirst()) }
        } else if let colon = authority.lastIndex(of: ":") {
            host = String(authority[..<colon])
            port = String(authority[authority.index(after: colon)...])
        }
        let defaultPort = scheme == "https" ? "443" : "80"
        let shownPort = port.flatMap { $0 == defaultPort || $0.isEmpty ? nil : ":" + $0 } ?? ""
        return ("\(scheme)://\(host)\(shownPort)", host)
    }

    /// An IPv4 dotted quad or a bracketed / bare IPv6 address.
    static func isIPAddress(_ host: String) -> Bool {
        if host.hasPrefix("[") || host.contains(":") { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { part in !part.isEmpty && part.allSatisfy(\.isNumber) }
    }
}
