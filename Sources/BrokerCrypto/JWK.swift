import BrokerCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A JSON Web Key (RFC 7517) for the key types the broker supports: EC P-256, RSA and Ed25519 (OKP).
///
/// Members not listed here are ignored on input and never written.
package struct JWK: Sendable, Hashable, Codable {
    package var kty: String
    package var crv: String?
    package var x: String?
    package var y: String?
    package var n: String?
    package var e: String?
    package var d: String?
    package var p: String?
    package var q: String?
    package var dp: String?
    package var dq: String?
    package var qi: String?
    package var kid: String?
    package var alg: String?
    package var use: String?
    /// Permitted operations (RFC 7517 §4.3); when present, must include `verify` (or `sign` for private keys).
    package var key_ops: [String]?

    package init(kty: String) { self.kty = kty }

    /// Whether private members are present.
    package var hasPrivateMembers: Bool { d != nil || p != nil || q != nil || dp != nil || dq != nil || qi != nil }

    /// This key with every private member removed.
    package var publicOnly: JWK {
        var copy = self
        copy.d = nil
        copy.p = nil
        copy.q = nil
        copy.dp = nil
        copy.dq = nil
        copy.qi = nil
        return copy
    }

    /// The RFC 7638 thumbprint input: the required public members in lexicographic order, no whitespace.
    package func thumbprintInput() throws -> String {
        func member(_ value: String?, _ name: String) throws -> String {
            guard let value else { throw CryptoError.invalidKey("JWK member \(name) missing") }
            // Values here are base64url or fixed names; anything needing JSON escaping is not a valid key.
            guard value.utf8.allSatisfy({ $0 >= 0x20 && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") })
            else { throw CryptoError.invalidKey("JWK member \(name) malformed") }
            return value
        }
        switch kty {
        case "EC":
            return
                "{\"crv\":\"\(try member(crv, "crv"))\",\"kty\":\"EC\",\"x\":\"\(try member(x, "x"))\",\"y\":\"\(try member(y, "y"))\"}"
        case "RSA":
            return "{\"e\":\"\(try member(e, "e"))\",\"kty\":\"RSA\",\"n\":\"\(try member(n, "n"))\"}"
        case "OKP":
            return "{\"crv\":\"\(try member(crv, "crv"))\",\"kty\":\"OKP\",\"x\":\"\(try member(x, "x"))\"}"
        default:
            throw CryptoError.unsupportedKey("JWK kty \(kty) not supported")
        }
    }

    /// The RFC 7638 SHA-256 thumbprint, base64url: the broker's `kid`.
    package func thumbprint() throws -> String {
        Base64URL.encode(Digest.sha256(try thumbprintInput()))
    }
}

/// A JWK Set (RFC 7517 §5).
package struct JWKSet: Sendable, Hashable, Codable {
    package var keys: [JWK]

    package init(keys: [JWK]) { self.keys = keys }

    /// Parses a JWKS document, keeping the keys the broker can use and skipping the rest (other `kty`s,
    /// encryption keys), as RFC 7517 §5 asks of implementations that meet unknown keys.
    package static func parse(_ data: [UInt8]) throws -> JWKSet {
        struct Loose: Decodable { var keys: [JSONValue] }
        let loose: Loose
        do {
            loose = try JSONDecoder().decode(Loose.self, from: Data(data))
        } catch {
            throw CryptoError.invalidEncoding("not a JWK Set: \(error)")
        }
        var keys: [JWK] = []
        for value in loose.keys {
            guard let encoded = try? JSONEncoder().encode(value),
                let jwk = try? JSONDecoder().decode(JWK.self, from: encoded)
            else { continue }
            keys.append(jwk)
        }
        return JWKSet(keys: keys)
    }
}
