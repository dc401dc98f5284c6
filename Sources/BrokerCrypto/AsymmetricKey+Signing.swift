internal import COpenSSL

extension AsymmetricKey {
    /// Signs `message` with this key's algorithm and returns the JWS signature bytes.
    ///
    /// ES256 signatures are the 64-byte `r || s` JWS requires (RFC 7518 §3.4), converted from OpenSSL's DER.
    public func sign<Bytes: Collection>(_ message: Bytes) throws -> [UInt8] where Bytes.Element == UInt8 {
        guard isPrivate else { throw CryptoError.invalidKey("signing needs a private key") }
        let input = Array(message)
        guard let ctx = EVP_MD_CTX_new() else { throw CryptoError.openSSL("signing") }
        defer { EVP_MD_CTX_free(ctx) }
        // Ed25519 hashes internally: it takes no digest.
        let md = kind == .ed25519 ? nil : EVP_sha256()
        guard EVP_DigestSignInit(ctx, nil, md, nil, pkey) == 1 else { throw CryptoError.openSSL("signing") }
        var length = 0
        guard (input.withUnsafeBufferPointer { EVP_DigestSign(ctx, nil, &length, $0.baseAddress, $0.count) }) == 1
        else { throw CryptoError.openSSL("signing") }
        var signature = [UInt8](repeating: 0, count: length)
        guard
            (input.withUnsafeBufferPointer { EVP_DigestSign(ctx, &signature, &length, $0.baseAddress, $0.count) })
                == 1
        else { throw CryptoError.openSSL("signing") }
        signature.removeLast(signature.count - length)
        if kind == .ecP256 {
            return try ECDSASignature.rawFromDER(signature)
        }
        return signature
    }

    /// Verifies a JWS signature over `message`; every malformed or wrong signature is simply `false`.
    public func verify<Sig: Collection, Bytes: Collection>(signature: Sig, message: Bytes) -> Bool
    where Sig.Element == UInt8, Bytes.Element == UInt8 {
        var sig = Array(signature)
        switch kind {
        case .ecP256:
            // Raw r || s only: a DER signature (70-72 bytes) is never accepted.
            guard sig.count == 64, let der = ECDSASignature.derFromRaw(sig) else { return false }
            sig = der
        case .rsa(let bits):
            guard sig.count == (bits + 7) / 8 else { return false }
        case .ed25519:
            guard sig.count == 64 else { return false }
        }
        let input = Array(message)
        guard let ctx = EVP_MD_CTX_new() else { return false }
        defer {
            EVP_MD_CTX_free(ctx)
            ERR_clear_error()
        }
        let md = kind == .ed25519 ? nil : EVP_sha256()
        guard EVP_DigestVerifyInit(ctx, nil, md, nil, pkey) == 1 else { return false }
        let result = sig.withUnsafeBufferPointer { sigBuffer in
            input.withUnsafeBufferPointer { inputBuffer in
                EVP_DigestVerify(ctx, sigBuffer.baseAddress, sigBuffer.count, inputBuffer.baseAddress, inputBuffer.count)
            }
        }
        return result == 1
    }
}

/// Conversions between the DER `ECDSA-Sig-Value` OpenSSL speaks and JWS's fixed-width `r || s`.
enum ECDSASignature {
    static let componentLength = 32

    static func rawFromDER(_ der: [UInt8]) throws -> [UInt8] {
        let sig: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var input: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &input, buffer.count)
        }
        guard let sig else { throw CryptoError.openSSL("ECDSA signature decoding") }
        defer { ECDSA_SIG_free(sig) }
        var raw = [UInt8](repeating: 0, count: 2 * componentLength)
        guard let r = ECDSA_SIG_get0_r(sig), let s = ECDSA_SIG_get0_s(sig) else {
            throw CryptoError.openSSL("ECDSA signature decoding")
        }
        let ok = raw.withUnsafeMutableBufferPointer { buffer -> Bool in
            guard let base = buffer.baseAddress else { return false }
            return BN_bn2binpad(r, base, Int32(componentLength)) == componentLength
                && BN_bn2binpad(s, base + componentLength, Int32(componentLength)) == componentLength
        }
        guard ok else { throw CryptoError.openSSL("ECDSA signature encoding") }
        return raw
    }

    static func derFromRaw(_ raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 2 * componentLength, let sig = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(sig) }
        let rBytes = Array(raw[..<componentLength])
        let sBytes = Array(raw[componentLength...])
        let r = rBytes.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32(componentLength), nil) }
        let s = sBytes.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32(componentLength), nil) }
        guard let r, let s else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        // ECDSA_SIG_set0 takes ownership of r and s.
        guard ECDSA_SIG_set0(sig, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(sig, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var out = buffer.baseAddress
            return i2d_ECDSA_SIG(sig, &out)
        }
        return written == length ? der : nil
    }
}
