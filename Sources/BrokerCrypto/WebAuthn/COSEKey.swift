/// A credential public key in COSE_Key form (RFC 9052 §7, RFC 9053): what an authenticator hands out at
/// registration and the broker stores to check each later sign-in.
///
/// Three algorithms, on the same OpenSSL code as the broker's JWTs: ES256 (EC2 P-256, COSE -7), EdDSA (OKP
/// Ed25519, COSE -8) and RS256 (RSA PKCS#1 v1.5 with SHA-256, COSE -257; moduli of 2048 bits and more).
package struct COSEKey: Sendable {
    package enum Algorithm: Int, Sendable, CaseIterable {
        case es256 = -7
        case edDSA = -8
        case rs256 = -257

        package var name: String {
            switch self {
            case .es256: "ES256"
            case .edDSA: "EdDSA"
            case .rs256: "RS256"
            }
        }
    }

    package let algorithm: Algorithm
    package let key: AsymmetricKey
    /// The key's CBOR bytes as the authenticator wrote them (what the store keeps).
    package let encoded: [UInt8]

    /// Reads a COSE_Key; refuses other key types, curves and algorithms, a key whose parts do not fit its
    /// algorithm, and a point that is not on the curve.
    package init(_ item: CBOR, encoded: [UInt8]) throws(WebAuthnError) {
        guard item.mapValue != nil else { throw .malformed("the credential public key is not a COSE_Key map") }
        guard let kty = item[int: 1]?.intValue else { throw .malformed("the COSE key has no kty") }
        guard let alg = item[int: 3]?.intValue else { throw .malformed("the COSE key has no alg") }
        guard let algorithm = Algorithm(rawValue: alg) else {
            throw .unsupported("COSE algorithm \(alg) (supported: ES256 -7, EdDSA -8, RS256 -257)")
        }
        var jwk: JWK
        switch (algorithm, kty) {
        case (.es256, 2):
            guard item[int: -1]?.intValue == 1 else { throw .unsupported("an EC2 key not on P-256") }
            guard let x = item[int: -2]?.bytesValue, let y = item[int: -3]?.bytesValue, x.count == 32, y.count == 32
            else { throw .malformed("the P-256 key's x and y are not 32 bytes each") }
            jwk = JWK(kty: "EC")
            jwk.crv = "P-256"
            jwk.x = Base64URL.encode(x)
            jwk.y = Base64URL.encode(y)
        case (.edDSA, 1):
            guard item[int: -1]?.intValue == 6 else { throw .unsupported("an OKP key not on Ed25519") }
            guard let x = item[int: -2]?.bytesValue, x.count == 32 else {
                throw .malformed("the Ed25519 key is not 32 bytes")
            }
            jwk = JWK(kty: "OKP")
            jwk.crv = "Ed25519"
            jwk.x = Base64URL.encode(x)
        case (.rs256, 3):
            guard let n = item[int: -1]?.bytesValue, let e = item[int: -2]?.bytesValue, !n.isEmpty, !e.isEmpty else {
                throw .malformed("the RSA key has no n or e")
            }
            jwk = JWK(kty: "RSA")
            jwk.n = Base64URL.encode(n)
            jwk.e = Base64URL.encode(e)
        default:
            throw .malformed("COSE key type \(kty) does not go with \(algorithm.name)")
        }
        do {
            key = try AsymmetricKey(jwk: jwk)
        } catch {
            throw .malformed("the credential public key is not usable: \(error)")
        }
        self.algorithm = algorithm
        self.encoded = encoded
    }

    /// Reads a stored COSE key (its bytes, exactly one CBOR item).
    package init(encoded: [UInt8]) throws(WebAuthnError) {
        let item: CBOR
        do {
            item = try CBORReader.decode(encoded)
        } catch {
            throw .malformed("the COSE key is not CBOR: \(error)")
        }
        try self.init(item, encoded: encoded)
    }

    /// Whether `signature` is this key's WebAuthn signature over `message`: ES256 signatures are ASN.1 DER
    /// (WebAuthn §6.5.6), not the raw `r || s` of JWS; every malformed signature is simply `false`.
    package func verify(signature: [UInt8], message: [UInt8]) -> Bool {
        switch algorithm {
        case .es256:
            guard signature.count <= 72, let raw = try? ECDSASignature.rawFromDER(signature),
                ECDSASignature.derFromRaw(raw) == signature
            else { return false }
            return key.verify(signature: raw, message: message)
        case .edDSA, .rs256:
            return key.verify(signature: signature, message: message)
        }
    }
}

extension AsymmetricKey {
    /// A WebAuthn signature over `message` with this private key: DER for ES256 (as authenticators write it),
    /// the raw signature for EdDSA and RS256. What the tests' software authenticator signs with.
    package func webAuthnSignature(_ message: [UInt8]) throws -> [UInt8] {
        let signature = try sign(message)
        guard kind == .ecP256 else { return signature }
        guard let der = ECDSASignature.derFromRaw(signature) else { throw CryptoError.openSSL("DER signature") }
        return der
    }

    /// This public key as a COSE_Key for `algorithm` (ES256, EdDSA or RS256).
    package func coseKey(_ algorithm: COSEKey.Algorithm) throws -> CBOR {
        let jwk = try self.jwk()
        func bytes(_ member: String?) throws -> [UInt8] {
            guard let member, let decoded = Base64URL.decode(member) else { throw CryptoError.invalidKey("JWK member") }
            return decoded
        }
        let alg = CBOR.int(algorithm.rawValue)
        switch algorithm {
        case .es256:
            return .map([
                .init(.int(1), .int(2)), .init(.int(3), alg), .init(.int(-1), .int(1)),
                .init(.int(-2), .bytes(try bytes(jwk.x))), .init(.int(-3), .bytes(try bytes(jwk.y))),
            ])
        case .edDSA:
            return .map([
                .init(.int(1), .int(1)), .init(.int(3), alg), .init(.int(-1), .int(6)),
                .init(.int(-2), .bytes(try bytes(jwk.x))),
            ])
        case .rs256:
            return .map([
                .init(.int(1), .int(3)), .init(.int(3), alg), .init(.int(-1), .bytes(try bytes(jwk.n))),
                .init(.int(-2), .bytes(try bytes(jwk.e))),
            ])
        }
    }
}
