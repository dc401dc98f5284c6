package import BrokerCore

/// The two credential-helper protocols broker speaks, shared by `broker credential` (broker-full) and the
/// launcher's warm path, so both give the same answer from the same code.
///
/// A helper answers only for URLs the profile lists in `api_urls`: a token is handed to git or docker for a
/// host someone configured, never for whatever server asks.
package enum CredentialHelper {
    /// Which helper: the name it is installed under is `git-credential-broker` / `docker-credential-broker`.
    package enum Kind: String, Sendable, CaseIterable {
        case git
        case docker

        /// The installed name the launcher recognises in `argv[0]`.
        package var installedName: String { "\(rawValue)-credential-broker" }
    }

    /// The user name handed out with the token when none is configured. User ids contain `:`, which a Basic
    /// user name may not (RFC 7617 §2), and servers that take a bearer token as the password ignore the name.
    package static let defaultUsername = "broker"

    /// Seconds the token must still be valid when it is handed out: git and docker keep it for one command.
    package static let minValid: Int64 = 60

    /// Largest request a helper reads from stdin (git's and docker's are a few hundred bytes); below a pipe's
    /// capacity, so the launcher can hand what it read on to broker-full through one.
    package static let maxRequestBytes = 60 * 1024

    // MARK: git

    /// git's `key=value` lines (git-credential(1)), up to a blank line; later values of a key win, as in git.
    /// Keys ending in `[]` (capabilities, `wwwauth[]`) are multi-valued and not needed here.
    package static func gitFields(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.hasSuffix("\r") ? line.dropLast() : line
            if trimmed.isEmpty { break }
            guard let equals = trimmed.firstIndex(of: "="), !trimmed[..<equals].hasSuffix("[]") else { continue }
            fields[String(trimmed[..<equals])] = String(trimmed[trimmed.index(after: equals)...])
        }
        return fields
    }

    /// The URL git asks about (`url=`, else `protocol=`, `host=` and `path=`), and whether git named a path
    /// (it does only with `credential.useHttpPath`).
    package static func gitTarget(_ fields: [String: String]) -> (url: APIURL, hasPath: Bool)? {
        if let url = fields["url"], let parsed = APIURL(url) {
            return (parsed, !parsed.path.isEmpty && parsed.path != "/")
        }
        // Strictly: a host (and port) and nothing else, a path without a query or fragment to cut it short.
        guard let scheme = fields["protocol"], scheme == "https" || scheme == "http", let host = fields["host"],
            APIURL.authority(host, scheme: scheme) != nil
        else { return nil }
        let path = fields["path"] ?? ""
        guard !path.contains("?"), !path.contains("#"), let parsed = APIURL(scheme + "://" + host + "/" + path)
        else { return nil }
        return (parsed, !path.isEmpty)
    }

    /// The answer to `get`: user name, token, and when it expires (git ≥ 2.41 reads `password_expiry_utc`).
    package static func gitAnswer(_ session: Session, username: String) -> String {
        "username=\(username)\npassword=\(session.accessToken.exposed)\npassword_expiry_utc=\(session.expiresAt)\n"
    }

    // MARK: docker

    /// The server URL docker sends (`registry.example.com`, `https://index.docker.io/v1/`); a bare host means
    /// https, as docker means it.
    package static func dockerTarget(_ text: String) -> (url: APIURL, hasPath: Bool)? {
        let line = String(text.prefix { $0 != "\n" && $0 != "\r" })
        guard !line.isEmpty else { return nil }
        let lower = line.lowercased()
        let full = lower.hasPrefix("https://") || lower.hasPrefix("http://") ? line : "https://" + line
        guard let url = APIURL(full) else { return nil }
        return (url, !url.path.isEmpty && url.path != "/")
    }

    /// The answer to `get`: `{"ServerURL", "Username", "Secret"}`.
    package static func dockerAnswer(serverURL: String, _ session: Session, username: String) -> String {
        let document: JSONValue = [
            "ServerURL": .string(serverURL), "Username": .string(username),
            "Secret": .string(session.accessToken.exposed),
        ]
        return document.serialized() + "\n"
    }

    /// What docker recognises as "no credentials for this server" (docker-credential-helpers'
    /// `credentials.ErrCredentialsNotFound`), on stdout with exit status 1.
    package static let dockerNotFound = "credentials not found in native keychain"
}

extension ClientSettings {
    /// Whether a credential helper hands this profile's token to `url`: the profile must list it in
    /// `api_urls`. A tool that names only a host (git without `credential.useHttpPath`, docker with a bare
    /// registry name) is answered when a listed URL has that origin; one that names a path, when a listed URL
    /// covers the path.
    package func answersCredentials(for url: APIURL, hasPath: Bool) -> Bool {
        guard url.carriesTokensSafely, let apiURLs else { return false }
        return apiURLs.contains { listed in
            hasPath ? listed.covers(url) : listed.origin == url.origin
        }
    }

    /// The resource indicator a helper asks the broker's token for (`"resource"` of the first `api_urls` entry
    /// that answers `url`, by the rule of ``answersCredentials(for:hasPath:)``); `nil`: the session's own token.
    package func credentialResource(for url: APIURL, hasPath: Bool) -> String? {
        apiURLs?.first { listed in
            listed.resource != nil && (hasPath ? listed.covers(url) : listed.origin == url.origin)
        }?.resource
    }
}
