import BrokerCore

/// Proof Key for Code Exchange (RFC 7636), S256 only: `plain` offers no protection and is never accepted.
package struct PKCE: Sendable {
    /// The `code_verifier`: 43–128 characters of `[A-Z] / [a-z] / [0-9] / "-" / "." / "_" / "~"` (RFC 7636 §4.1).
    package let verifier: String

    /// A fresh verifier from 32 random bytes (43 characters), as RFC 7636 §4.1 recommends.
    package static func generate() throws -> PKCE {
        PKCE(uncheckedVerifier: try SecureRandom.token(byteCount: 32))
    }

    private init(uncheckedVerifier: String) { self.verifier = uncheckedVerifier }

    /// Wraps a verifier received on the wire; `nil` unless it has the RFC's length and alphabet.
    package init?(verifier: String) {
        guard PKCE.isValidVerifier(verifier) else { return nil }
        self.verifier = verifier
    }

    /// `code_challenge = BASE64URL-ENCODE(SHA256(ASCII(code_verifier)))` (RFC 7636 §4.2).
    package var challenge: String { PKCE.challenge(for: verifier) }

    package static func challenge(for verifier: String) -> String {
        Base64URL.encode(Digest.sha256(verifier))
    }

    package static func isValidVerifier(_ verifier: String) -> Bool {
        let bytes = Array(verifier.utf8)
        guard (43...128).contains(bytes.count) else { return false }
        // RFC 7636 §4.1: unreserved characters only.
        return bytes.allSatisfy(\.isURIUnreserved)
    }

    /// A challenge as S256 makes it: 43 base64url characters (a SHA-256 digest).
    package static func isValidS256Challenge(_ challenge: String) -> Bool {
        challenge.utf8.count == 43 && Base64URL.decode(challenge)?.count == 32
    }

    /// Checks a verifier against a stored S256 challenge in constant time.
    package static func verify(verifier: String, challenge: String) -> Bool {
        guard isValidVerifier(verifier) else { return false }
        return ConstantTime.equals(PKCE.challenge(for: verifier), challenge)
    }
}
