internal import COpenSSL
import Glibc

extension AsymmetricKey {
    /// Builds a key from a JWK; private when the JWK carries private members.
    ///
    /// Checks the whole key: EC coordinates and scalars of exactly 32 bytes on P-256, RSA moduli of at least
    /// 2048 bits, a private part that matches its public part, and an `alg`/`use` (when present) that fit.
    package convenience init(jwk: JWK) throws {
        if let use = jwk.use, use != "sig" { throw CryptoError.unsupportedKey("JWK use \(use) is not sig") }
        let pkey: OpaquePointer
        let isPrivate = jwk.d != nil
        if let ops = jwk.key_ops {
            let needed = isPrivate ? "sign" : "verify"
            guard ops.contains(needed) else {
                throw CryptoError.unsupportedKey("JWK key_ops \(ops) does not allow \(needed)")
            }
        }
        switch jwk.kty {
        case "EC":
            guard jwk.crv == "P-256" else {
                throw CryptoError.unsupportedKey("EC curve \(jwk.crv ?? "none") not supported")
            }
            let x = try AsymmetricKey.member(jwk.x, "x", length: 32)
            let y = try AsymmetricKey.member(jwk.y, "y", length: 32)
            var params = ParamBuilder()
            params.utf8("group", "prime256v1")
            params.octets("pub", [0x04] + x + y)
            if isPrivate { params.bignum("priv", try AsymmetricKey.member(jwk.d, "d", length: 32)) }
            pkey = try params.makeKey(type: "EC", isPrivate: isPrivate)
        case "RSA":
            let n = try AsymmetricKey.member(jwk.n, "n")
            let e = try AsymmetricKey.member(jwk.e, "e")
            guard n.first != 0, e.first != 0 else { throw CryptoError.invalidKey("RSA JWK has leading zero octets") }
            // Checked here, deterministically: OpenSSL's RSA public-key check tests the modulus with random
            // Miller-Rabin bases, so a malformed modulus was accepted on one try and refused on the next (found
            // by Fuzz/jwk). An odd modulus and an odd exponent from 65537 to below 2^256 (SP 800-56B §6.2.1,
            // as OpenSSL's check asks) remain; the size is checked once the key is built.
            guard let last = n.last, last & 1 == 1 else { throw CryptoError.invalidKey("RSA JWK modulus is even") }
            guard let eLast = e.last, eLast & 1 == 1, e.count <= 32,
                e.count > 3 || e.reduce(0, { $0 << 8 | Int($1) }) >= 65537
            else { throw CryptoError.invalidKey("RSA JWK exponent must be odd, at least 65537 and below 2^256") }
            var params = ParamBuilder()
            params.bignum("n", n)
            params.bignum("e", e)
            if isPrivate {
                params.bignum("d", try AsymmetricKey.member(jwk.d, "d"))
                let crt = [jwk.p, jwk.q, jwk.dp, jwk.dq, jwk.qi]
                if crt.allSatisfy({ $0 != nil }) {
                    params.bignum("rsa-factor1", try AsymmetricKey.member(jwk.p, "p"))
                    params.bignum("rsa-factor2", try AsymmetricKey.member(jwk.q, "q"))
                    params.bignum("rsa-exponent1", try AsymmetricKey.member(jwk.dp, "dp"))
                    params.bignum("rsa-exponent2", try AsymmetricKey.member(jwk.dq, "dq"))
                    params.bignum("rsa-coefficient1", try AsymmetricKey.member(jwk.qi, "qi"))
                } else if crt.contains(where: { $0 != nil }) {
                    throw CryptoError.invalidKey("RSA JWK has some but not all CRT members")
                }
            }
            pkey = try params.makeKey(type: "RSA", isPrivate: isPrivate, checkPublic: false)
        case "OKP":
            guard jwk.crv == "Ed25519" else {
                throw CryptoError.unsupportedKey("OKP curve \(jwk.crv ?? "none") not supported")
            }
            let x = try AsymmetricKey.member(jwk.x, "x", length: 32)
            if isPrivate {
                let d = try AsymmetricKey.member(jwk.d, "d", length: 32)
                guard
                    let made = d.withUnsafeBufferPointer({
                        EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, $0.baseAddress, 32)
                    })
                else { throw CryptoError.openSSL("Ed25519 key import") }
                pkey = made
            } else {
                guard
                    let made = x.withUnsafeBufferPointer({
                        EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, $0.baseAddress, 32)
                    })
                else { throw CryptoError.openSSL("Ed25519 key import") }
                pkey = made
            }
            if isPrivate {
                var derived = [UInt8](repeating: 0, count: 32)
                var length = 32
                guard EVP_PKEY_get_raw_public_key(pkey, &derived, &length) == 1, ConstantTime.equals(derived, x) else {
                    EVP_PKEY_free(pkey)
                    throw CryptoError.invalidKey("Ed25519 JWK: x does not match d")
                }
            }
        default:
            throw CryptoError.unsupportedKey("JWK kty \(jwk.kty) not supported")
        }
        try self.init(taking: pkey, isPrivate: isPrivate)
        if let alg = jwk.alg, alg != algorithm.rawValue {
            throw CryptoError.unsupportedKey("JWK alg \(alg) does not fit a \(kind) key")
        }
        if isPrivate && kind != .ed25519 {
            try checkPairwise()
        }
    }

    private static func member(_ value: String?, _ name: String, length: Int? = nil) throws -> [UInt8] {
        guard let value else { throw CryptoError.invalidKey("JWK member \(name) missing") }
        guard let bytes = Base64URL.decode(value), !bytes.isEmpty else {
            throw CryptoError.invalidKey("JWK member \(name) is not base64url")
        }
        if let length, bytes.count != length {
            throw CryptoError.invalidKey("JWK member \(name) must be \(length) bytes, not \(bytes.count)")
        }
        return bytes
    }

    private func checkPairwise() throws {
        guard let ctx = EVP_PKEY_CTX_new_from_pkey(nil, pkey, nil) else { throw CryptoError.openSSL("key check") }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_pairwise_check(ctx) == 1 else {
            ERR_clear_error()
            throw CryptoError.invalidKey("private key does not match its public key")
        }
    }

    /// The key as a JWK with `kid` (its RFC 7638 thumbprint), `alg` and `use: "sig"`.
    ///
    /// - Parameter includePrivate: write the private members too; only ever for files of our own.
    package func jwk(includePrivate: Bool = false) throws -> JWK {
        var jwk: JWK
        switch kind {
        case .ecP256:
            jwk = JWK(kty: "EC")
            jwk.crv = "P-256"
            jwk.x = Base64URL.encode(try bignumParam("qx", padTo: 32))
            jwk.y = Base64URL.encode(try bignumParam("qy", padTo: 32))
            if includePrivate && isPrivate { jwk.d = Base64URL.encode(try bignumParam("priv", padTo: 32)) }
        case .rsa:
            jwk = JWK(kty: "RSA")
            jwk.n = Base64URL.encode(try bignumParam("n"))
            jwk.e = Base64URL.encode(try bignumParam("e"))
            if includePrivate && isPrivate {
                jwk.d = Base64URL.encode(try bignumParam("d"))
                jwk.p = Base64URL.encode(try bignumParam("rsa-factor1"))
                jwk.q = Base64URL.encode(try bignumParam("rsa-factor2"))
                jwk.dp = Base64URL.encode(try bignumParam("rsa-exponent1"))
                jwk.dq = Base64URL.encode(try bignumParam("rsa-exponent2"))
                jwk.qi = Base64URL.encode(try bignumParam("rsa-coefficient1"))
            }
        case .ed25519:
            jwk = JWK(kty: "OKP")
            jwk.crv = "Ed25519"
            var raw = [UInt8](repeating: 0, count: 32)
            var length = 32
            guard EVP_PKEY_get_raw_public_key(pkey, &raw, &length) == 1 else { throw CryptoError.openSSL("JWK export") }
            jwk.x = Base64URL.encode(raw)
            if includePrivate && isPrivate {
                length = 32
                guard EVP_PKEY_get_raw_private_key(pkey, &raw, &length) == 1 else {
                    throw CryptoError.openSSL("JWK export")
                }
                jwk.d = Base64URL.encode(raw)
            }
        }
        jwk.kid = try jwk.thumbprint()
        jwk.alg = algorithm.rawValue
        jwk.use = "sig"
        return jwk
    }

    /// The RFC 7638 thumbprint of the public key, used as its `kid`.
    package func thumbprint() throws -> String { try jwk().thumbprint() }

    private func bignumParam(_ name: String, padTo width: Int? = nil) throws -> [UInt8] {
        var bn: OpaquePointer?
        guard EVP_PKEY_get_bn_param(pkey, name, &bn) == 1, let bn else {
            throw CryptoError.openSSL("key export (\(name))")
        }
        defer { BN_clear_free(bn) }
        let length = width ?? Int((BN_num_bits(bn) + 7) / 8)
        var out = [UInt8](repeating: 0, count: max(length, 1))
        guard BN_bn2binpad(bn, &out, Int32(out.count)) == out.count else {
            throw CryptoError.openSSL("key export (\(name))")
        }
        return out
    }
}

/// Collects OSSL_PARAMs for EVP_PKEY_fromdata, keeping the Swift buffers alive until the key is made.
private struct ParamBuilder {
    private enum Entry {
        case utf8(String, String)
        case octets(String, [UInt8])
        case bignum(String, [UInt8])
    }

    private var entries: [Entry] = []

    mutating func utf8(_ key: String, _ value: String) { entries.append(.utf8(key, value)) }
    mutating func octets(_ key: String, _ value: [UInt8]) { entries.append(.octets(key, value)) }
    mutating func bignum(_ key: String, _ value: [UInt8]) { entries.append(.bignum(key, value)) }

    /// - Parameter checkPublic: run OpenSSL's public-key check on a public key (the point is on the curve).
    func makeKey(type: String, isPrivate: Bool, checkPublic: Bool = true) throws -> OpaquePointer {
        guard let builder = OSSL_PARAM_BLD_new() else { throw CryptoError.openSSL("key import") }
        defer { OSSL_PARAM_BLD_free(builder) }
        // The builder keeps the pointers it is given (names, strings, octets, BIGNUMs) until
        // OSSL_PARAM_BLD_to_param copies them, so every buffer must outlive that call: none may be a
        // temporary Swift bridge.
        var buffers: [UnsafeMutableRawPointer] = []
        var bignums: [OpaquePointer] = []
        defer {
            buffers.forEach { free($0) }
            bignums.forEach { BN_clear_free($0) }
        }
        func cString(_ text: String) -> UnsafeMutablePointer<CChar>? {
            guard let copy = strdup(text) else { return nil }
            buffers.append(UnsafeMutableRawPointer(copy))
            return copy
        }
        for entry in entries {
            let ok: Int32
            switch entry {
            case .utf8(let key, let value):
                ok = OSSL_PARAM_BLD_push_utf8_string(builder, cString(key), cString(value), 0)
            case .octets(let key, let value):
                guard let copy = malloc(max(value.count, 1)) else { throw CryptoError.openSSL("key import") }
                buffers.append(copy)
                value.withUnsafeBytes { source in
                    if let base = source.baseAddress { copy.copyMemory(from: base, byteCount: source.count) }
                }
                ok = OSSL_PARAM_BLD_push_octet_string(builder, cString(key), copy, value.count)
            case .bignum(let key, let value):
                guard let bn = value.withUnsafeBufferPointer({ BN_bin2bn($0.baseAddress, Int32($0.count), nil) }) else {
                    throw CryptoError.openSSL("key import")
                }
                bignums.append(bn)
                ok = OSSL_PARAM_BLD_push_BN(builder, cString(key), bn)
            }
            guard ok == 1 else { throw CryptoError.openSSL("key import") }
        }
        guard let params = OSSL_PARAM_BLD_to_param(builder) else { throw CryptoError.openSSL("key import") }
        defer { OSSL_PARAM_free(params) }
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, type, nil) else { throw CryptoError.openSSL("key import") }
        defer { EVP_PKEY_CTX_free(ctx) }
        var pkey: OpaquePointer?
        let selection = isPrivate ? broker_selection_keypair() : broker_selection_public_key()
        guard EVP_PKEY_fromdata_init(ctx) == 1, EVP_PKEY_fromdata(ctx, &pkey, selection, params) == 1, let pkey else {
            let error = CryptoError.openSSL("key import")
            throw CryptoError.invalidKey("\(type) JWK rejected: \(error.reason)")
        }
        if !isPrivate && checkPublic {
            // fromdata does not prove the point is on the curve; a public-key check does.
            guard let check = EVP_PKEY_CTX_new_from_pkey(nil, pkey, nil) else {
                EVP_PKEY_free(pkey)
                throw CryptoError.openSSL("key check")
            }
            defer { EVP_PKEY_CTX_free(check) }
            guard EVP_PKEY_public_check(check) == 1 else {
                EVP_PKEY_free(pkey)
                ERR_clear_error()
                throw CryptoError.invalidKey("\(type) JWK: public key fails validation")
            }
        }
        return pkey
    }
}
