import BrokerConfiguration
package import BrokerCore
import BrokerCrypto
import BrokerSystem
import ProviderSupport

/// Client secrets are 256-bit random values; the store keeps only `HMAC-SHA256(key, secret)`.
///
/// A slow password hash buys nothing for a secret with 256 bits of entropy, and would make every
/// `client_credentials` request cost as much as a login. The HMAC key is kept in the store sealed under the
/// master key (``KeyVault``), which is not in the database, so a copy of the database alone does not even let
/// an attacker test a guessed secret.
package struct ClientSecretHasher: Sendable {
    private let key: HMACKey
    static let prefix = "hmac-sha256$"

    package init(key: [UInt8]) { self.key = HMACKey(.sha256, key: key) }

    /// A new secret: 32 random bytes, base64url (43 characters).
    package static func newSecret() throws -> Secret { Secret(try SecureRandom.token(byteCount: 32)) }

    package func hash(_ secret: Secret) -> String {
        Self.prefix + Base64URL.encode(key.authenticate(Array(secret.exposed.utf8)))
    }

    /// Compares in constant time; `false` for a stored value of another scheme. An app's secret
    /// (``newAppSecret(clientID:)``) is compared by its hash, as any.
    package func verify(_ secret: Secret, against stored: String) -> Bool {
        if stored.hasPrefix(Self.appPrefix) {
            guard let hashPart = stored.split(separator: "$").last else { return false }
            return ConstantTime.equals(
                Array(hashPart.utf8), Array(Base64URL.encode(key.authenticate(Array(secret.exposed.utf8))).utf8))
        }
        return ConstantTime.equals(hash(secret), stored)
    }

    /// The stored form of an app's secret: `hmac-sha256-app$<salt>$<HMAC of the secret>`.
    static let appPrefix = "hmac-sha256-app$"

    /// The key app secrets are derived under: the client-secret key's own HMAC of a label, so neither is the other.
    private var derivation: HMACKey { HMACKey(.sha256, key: key.authenticate(Array("broker app secret v1".utf8))) }

    private func derive(clientID: String, salt: [UInt8]) -> Secret {
        Secret(Base64URL.encode(derivation.authenticate(Array("\(clientID)\u{0}".utf8) + salt)))
    }

    /// A new secret for the app `clientID`, and what the store keeps of it. The secret is derived from broker's
    /// client-secret key, the client id and a random salt, and the store keeps the salt and the secret's HMAC —
    /// never the secret: so broker can work the secret out again to check a `client_secret_jwt` assertion (an
    /// HMAC under the secret, RFC 7523, OpenID Connect Core 9), while the database alone, without the master key
    /// that seals the client-secret key, yields no secret and cannot test a guess.
    package func newAppSecret(clientID: String) throws -> (secret: Secret, stored: String) {
        let salt = try SecureRandom.bytes(16)
        let secret = derive(clientID: clientID, salt: salt)
        return (
            secret,
            Self.appPrefix + Base64URL.encode(salt) + "$"
                + Base64URL.encode(key.authenticate(Array(secret.exposed.utf8)))
        )
    }

    /// The secret of the app `clientID` from what the store keeps (``newAppSecret(clientID:)``), checked against
    /// its stored hash; `nil` for a secret of the older kind (random, not derived), or a stored value that is not
    /// this app's.
    package func appSecret(clientID: String, stored: String) -> Secret? {
        guard stored.hasPrefix(Self.appPrefix) else { return nil }
        let parts = stored.dropFirst(Self.appPrefix.count).split(separator: "$", omittingEmptySubsequences: false)
        guard parts.count == 2, let salt = Base64URL.decode(String(parts[0])), salt.count == 16 else { return nil }
        let secret = derive(clientID: clientID, salt: salt)
        return verify(secret, against: stored) ? secret : nil
    }
}

/// A 256-bit secret key kept in the data directory's key folder (`keys/<name>`, 0600, base64url), created
/// under the folder's lock on first use: a single broker's master key (and, read once to import them into the
/// store, the client-secret and sign-in keys of data directories from before).
package enum DataDirectoryKey {
    package static func load(dataDirectory: String, name: String) throws -> [UInt8] {
        let directory = KeyRingStore.directory(dataDirectory: dataDirectory)
        let path = directory + "/" + name
        do {
            try PosixFile.ensurePrivateDirectory(directory)
            let lock = try FileLock(path: directory + "/.lock")
            defer { lock.unlock() }
            if PosixFile.exists(path) {
                let text = String(decoding: try PosixFile.read(path: path, maxSize: 1024), as: UTF8.self)
                guard let key = Base64URL.decode(text.trimmingWhitespace()), key.count == 32 else {
                    throw ConfigurationError(source: path, key: nil, problem: "not a 32-byte key in base64url")
                }
                return key
            }
            let key = try SecureRandom.bytes(32)
            try PosixFile.writeAtomically(Array((Base64URL.encode(key) + "\n").utf8), to: path)
            return key
        } catch let error as ConfigurationError {
            throw error
        } catch {
            throw ConfigurationError(source: directory, key: nil, problem: "\(name): \(error)")
        }
    }
}

/// Rules for client names, scopes and subject patterns, shared by `broker client add` and the grants.
package enum ClientRules {
    /// 1–64 of `A–Z a–z 0–9 . _ -`, starting with a letter or digit: safe in a URL, a form body, Basic
    /// authentication (no `:`), a log line and a `sub` claim.
    package static func validName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...64).contains(bytes.count), bytes[0].isASCIIAlphanumeric else { return false }
        return bytes.allSatisfy {
            $0.isASCIIAlphanumeric || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-")
        }
    }

    /// RFC 6749 §3.3 scope-token: printable ASCII except space, `"` and `\`.
    package static func validScope(_ scope: String) -> Bool {
        !scope.isEmpty && scope.utf8.count <= 128
            && scope.utf8.allSatisfy { $0 == 0x21 || (0x23...0x5B).contains($0) || (0x5D...0x7E).contains($0) }
    }

    /// Whether the whole of `subject` matches `pattern`: `*` any run of characters (also none, also `:`
    /// and `/`), `?` exactly one character, `\` makes the next character literal. Anchored at both ends.
    ///
    /// Linear backtracking over the last `*` only, so a hostile subject cannot make it slow.
    package static func subject(_ subject: String, matches pattern: String) -> Bool {
        // Unicode scalars, not Characters: Character equality is canonical equivalence, under which KELVIN
        // SIGN matches "K" and GREEK QUESTION MARK matches ";" — a subject must match exactly as sent.
        enum Token: Equatable {
            case literal(Unicode.Scalar)
            case one
            case any
        }
        var tokens: [Token] = []
        var escaped = false
        for character in pattern.unicodeScalars {
            if escaped {
                tokens.append(.literal(character))
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else if character == "*" {
                if tokens.last != .any { tokens.append(.any) }
            } else if character == "?" {
                tokens.append(.one)
            } else {
                tokens.append(.literal(character))
            }
        }
        if escaped { tokens.append(.literal("\\")) }
        let text = Array(subject.unicodeScalars)
        var t = 0
        var p = 0
        var star: Int?
        var resume = 0
        while t < text.count {
            if p < tokens.count {
                switch tokens[p] {
                case .any:
                    star = p
                    resume = t
                    p += 1
                    continue
                case .one:
                    t += 1
                    p += 1
                    continue
                case .literal(let character) where character == text[t]:
                    t += 1
                    p += 1
                    continue
                case .literal:
                    break
                }
            }
            guard let starAt = star else { return false }
            p = starAt + 1
            resume += 1
            t = resume
        }
        while p < tokens.count, tokens[p] == .any { p += 1 }
        return p == tokens.count
    }

    /// Why a trusted-issuer URL cannot be used (`nil` when it can): the contract's endpoint rule (`https`,
    /// or `http` on a loopback host), and no query or fragment (discovery is appended to it).
    package static func issuerProblem(_ issuer: String) -> String? {
        if let problem = Endpoint.problem(issuer) { return problem }
        guard !issuer.contains("?"), !issuer.contains("#") else { return "must not have a query or fragment" }
        return nil
    }
}
