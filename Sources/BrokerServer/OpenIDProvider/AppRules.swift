import BrokerCore
import BrokerCredentials
import BrokerCrypto
package import BrokerStore

/// What an app may register and ask for (issue "Sign in to any app"): pure rules, tested without a server.
package enum AppRules {
    /// The scopes every app may ask for. `address` and `phone` are answered with what broker knows of them:
    /// nothing, today (OpenID Connect Core 5.4 lets a provider return no value for a claim).
    package static let standardScopes = ["openid", "profile", "email", "address", "phone", "offline_access"]

    /// Signing algorithms an app may choose for its id tokens.
    package static let idTokenAlgorithms = ["RS256", "ES256", "EdDSA"]

    /// Why a redirect URI cannot be registered, or `nil`: `https`, or `http` on a loopback host or `localhost`,
    /// or a private-use scheme of a native app (`com.example.app:/oauth2redirect`, RFC 8252 §7.1); never a
    /// fragment, never credentials, never a wildcard.
    package static func registrationProblem(_ uri: String, isPublic: Bool) -> String? {
        guard uri.utf8.count <= 2000, !uri.contains(where: { $0.isWhitespace || $0 == "#" }) else {
            return "a redirect URI has no spaces and no fragment (#)"
        }
        let lower = uri.lowercased()
        if lower.hasPrefix("https://") || lower.hasPrefix("http://") {
            guard let url = APIURL(uri),
                !uri.dropFirst(lower.hasPrefix("https") ? 8 : 7).prefix(while: { $0 != "/" }).contains("@")
            else { return "\(uri) is not a valid URL (a host, no user name, no dot segments)" }
            if url.scheme == "http" && !url.isLoopback {
                return "\(uri): https is required except on 127.0.0.1, [::1] and localhost"
            }
            return nil
        }
        // A private-use scheme: reverse domain name with a dot, for native apps (public clients).
        guard let colon = uri.firstIndex(of: ":") else { return "\(uri) has no scheme" }
        let scheme = uri[..<colon]
        guard scheme.contains("."),
            scheme.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0)) }),
            scheme.first?.isLetter == true
        else {
            return "\(uri): the scheme must be https, http on loopback, or a reverse domain name (com.example.app:)"
        }
        guard isPublic else { return "\(uri): a private-use scheme belongs to a native app (add it with --public)" }
        return nil
    }

    /// The origin (`scheme://host[:port]`) of an http(s) URL, for a `form-action` source; `nil` for another
    /// scheme or a URL a policy could not name safely.
    package static func origin(_ url: String) -> String? {
        let lower = url.lowercased()
        guard lower.hasPrefix("https://") || lower.hasPrefix("http://") else { return nil }
        let afterScheme = url.index(url.startIndex, offsetBy: lower.hasPrefix("https://") ? 8 : 7)
        let authority = url[afterScheme...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard !authority.isEmpty, !authority.contains("@"),
            authority.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || ".-:[]".contains($0)) })
        else { return nil }
        return String(url[..<afterScheme]) + authority
    }

    /// Whether `presented` is one of `app`'s redirect URIs: exactly, or (RFC 8252 §7.3) for a public app a
    /// registered `http://127.0.0.1/…` or `http://[::1]/…` with any port.
    package static func matches(_ presented: String, of app: AppRecord) -> Bool {
        if app.redirectURIs.contains(presented) { return true }
        guard app.isPublic, let loopback = withoutPort(presented) else { return false }
        return app.redirectURIs.contains { withoutPort($0) == loopback }
    }

    /// `http://127.0.0.1:PORT/path` → `http://127.0.0.1/path` (and for `[::1]`); `nil` for any other URI.
    private static func withoutPort(_ uri: String) -> String? {
        for host in ["http://127.0.0.1", "http://[::1]"] where uri.hasPrefix(host) {
            let rest = uri.dropFirst(host.count)
            guard rest.first == ":" || rest.first == "/" || rest.isEmpty else { return nil }
            var path = rest
            if path.first == ":" {
                let port = path.dropFirst().prefix { $0.isASCII && $0.isNumber }
                guard !port.isEmpty, port.count <= 5 else { return nil }
                path = path.dropFirst(1 + port.count)
            }
            guard path.isEmpty || path.first == "/" || path.first == "?" else { return nil }
            return host + path
        }
        return nil
    }

    /// The scopes of `requested` the app may have, in its order, without duplicates: a scope broker does not
    /// know is ignored (OpenID Connect Core 3.1.2.1: an OP SHOULD ignore what it does not understand), and one it
    /// knows but the app may not have is left out of the grant — neither is an error. What was left out shows in
    /// the token response's `scope`.
    package static func scopes(_ requested: String, app: AppRecord, resource: ResourceRecord? = nil) -> [String] {
        let asked = requested.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        var granted: [String] = []
        for scope in asked where !granted.contains(scope) {
            if standardScopes.contains(scope) || app.scopes.contains(scope) || resource?.scopes.contains(scope) == true
            {
                granted.append(scope)
            }
        }
        return granted
    }

    /// Why a sector cannot be worked out from redirect URIs.
    package struct SectorProblem: Error, CustomStringConvertible {
        package let description: String
    }

    /// The sector of an app given pairwise subjects (OpenID Connect Core 8.1) from its redirect URIs: the one
    /// host they all name (a native app's private-use scheme stands for its host); several are an error.
    package static func sector(of redirectURIs: [String]) -> Result<String, SectorProblem> {
        var hosts: [String] = []
        for uri in redirectURIs {
            let host: String
            if let url = APIURL(uri) {
                host = url.host.lowercased()
            } else if let colon = uri.firstIndex(of: ":") {
                host = uri[..<colon].lowercased()
            } else {
                continue
            }
            if !hosts.contains(host) { hosts.append(host) }
        }
        guard hosts.count == 1 else {
            return .failure(
                SectorProblem(
                    description: hosts.isEmpty
                        ? "a pairwise app needs a redirect URI"
                        : "the redirect URIs name more than one host (\(hosts.joined(separator: ", "))): a pairwise "
                            + "app needs one sector — one host, or a sector_identifier_uri listing them"))
        }
        return .success(hosts[0])
    }

    /// The largest JWK Set an app may register inline.
    package static let maxJWKSBytes = 16 * 1024

    /// Why `text` cannot be an app's registered keys for `private_key_jwt`, or `nil`: a JWK Set (RFC 7517 §5) of
    /// at most 16 KiB and 10 keys, public keys only, at least one of a kind broker verifies (RSA, P-256, Ed25519).
    package static func jwksProblem(_ text: String) -> String? {
        guard text.utf8.count <= maxJWKSBytes else { return "the key set is larger than \(maxJWKSBytes / 1024) KiB" }
        guard let object = JSONValue.parse(text.utf8)?.objectValue, let keys = object["keys"]?.arrayValue else {
            return "the key set must be a JSON object with a \"keys\" array (a JWK Set, RFC 7517 §5)"
        }
        guard keys.count <= 10 else { return "the key set holds more than 10 keys" }
        guard let set = try? JWKSet.parse(Array(text.utf8)) else { return "the key set is not a JWK Set" }
        if set.keys.contains(where: \.hasPrivateMembers) {
            return "the key set holds a private key: register the public keys only, and keep the private ones"
        }
        guard let usable = try? JWTKeySet(jwks: set), !usable.isEmpty else {
            return "the key set holds no key broker verifies with (RSA, EC P-256 or Ed25519)"
        }
        return nil
    }

    /// Why `uri` cannot be where an app's keys are fetched from, or `nil`: https (http only on a loopback host, for
    /// development), a host, no credentials, no fragment.
    package static func jwksURIProblem(_ uri: String) -> String? {
        let lower = uri.lowercased()
        guard lower.hasPrefix("https://") || lower.hasPrefix("http://"), !uri.contains("#"),
            registrationProblem(uri, isPublic: false) == nil
        else { return "\(uri.prefix(200)) must be an https URL (http only on loopback), without a fragment" }
        return nil
    }

    /// The client id of the broker's own CLI: its sessions alone get account tokens and the APIs' audience, so no
    /// app or CI client may be registered under it (RT3-10).
    package static let cliClientID = "broker-cli"

    /// Whether no app may be registered (or, registered before this rule, be known) as `clientID`: the CLI's
    /// id, the account page's, or the APIs' audience — an app's tokens carry its client id as `aud` (RT3-4), so an app named after
    /// the APIs' audience would be given tokens every API takes. Compared without regard to case, so that
    /// `Broker-CLI` is no way around it either.
    package static func isReserved(_ clientID: String, apiAudience: String) -> Bool {
        let lower = clientID.lowercased()
        return lower == cliClientID || lower == accountClientID || clientID == apiAudience
    }

    /// The client id of the account page (`/account`), built in like the CLI's: no app may take it either.
    package static let accountClientID = "broker-account"

    /// A client id: 1–64 of `A–Z a–z 0–9 . _ -`, starting with a letter or digit (as CI clients').
    package static func isClientID(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 64 && (text.first?.isLetter == true || text.first?.isNumber == true)
            && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }
    }
}
