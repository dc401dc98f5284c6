import BrokerCore

/// The contract's rule for every URL a provider module or the broker fetches: `https`, or `http` on a
/// loopback host (emulators, tests); never user information (`http://localhost@evil.example/`).
package enum Endpoint {
    package static func problem(_ url: String) -> String? {
        let lower = url.lowercased()
        let rest: Substring
        if lower.hasPrefix("https://") {
            rest = lower.dropFirst("https://".count)
        } else if lower.hasPrefix("http://") {
            rest = lower.dropFirst("http://".count)
        } else {
            return "must be an https URL"
        }
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if authority.isEmpty { return "has no host" }
        if authority.contains("@") { return "must not contain user information (@)" }
        if lower.hasPrefix("https://") { return nil }
        let host: Substring
        if authority.hasPrefix("[") {
            host = authority.prefix { $0 != "]" }.dropFirst()
        } else {
            host = authority.prefix { $0 != ":" }
        }
        if LoopbackHost.contains(host) { return nil }
        return "must be https (http only on this machine: 127.0.0.0/8, [::1] or localhost)"
    }
}
