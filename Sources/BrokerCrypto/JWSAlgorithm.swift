/// The JWS algorithms the broker signs and verifies (RFC 7518 §3, RFC 8037 §3.1).
///
/// Each key is bound to exactly one of these; `none` and the `HS*` family do not exist here, so no header can
/// ask for them.
package enum JWSAlgorithm: String, Sendable, Hashable, Codable, CaseIterable {
    /// ECDSA P-256 with SHA-256; the signature is the raw 64-byte `r || s`, never DER (RFC 7518 §3.4).
    case ES256
    /// RSASSA-PKCS1-v1_5 with SHA-256, keys of 2048 bits or more (RFC 7518 §3.3).
    case RS256
    /// Ed25519 (RFC 8037).
    case EdDSA
}

/// The kinds of asymmetric key the broker accepts.
package enum KeyKind: Sendable, Hashable, CustomStringConvertible {
    case ecP256
    case rsa(bits: Int)
    case ed25519

    package var algorithm: JWSAlgorithm {
        switch self {
        case .ecP256: .ES256
        case .rsa: .RS256
        case .ed25519: .EdDSA
        }
    }

    package var description: String {
        switch self {
        case .ecP256: "EC P-256"
        case .rsa(let bits): "RSA \(bits)"
        case .ed25519: "Ed25519"
        }
    }
}
