internal import COpenSSL
import Synchronization

extension AsymmetricKey {
    /// Signs `message` with this key's algorithm and returns the JWS signature bytes.
    ///
    /// ES256 signatures are the 64-byte `r || s` JWS requires (RFC 7518 §3.4), converted from OpenSSL's DER.
    package func sign<Bytes: Collection>(_ message: Bytes) throws -> [UInt8] where Bytes.Element == UInt8 {
        guard isPrivate else { throw CryptoError.invalidKey("signing needs a private key") }
        let input = Array(message)
        if kind == .ed25519 { return try signEd25519(input) }
        let digest = Digest.sha256(input)
        let ctx = try takeContext(signing: true)
        defer { giveBack(ctx, signing: true) }
        var length = 0
        guard EVP_PKEY_sign(ctx, nil, &length, digest, digest.count) == 1 else { throw CryptoError.openSSL("signing") }
        var signature = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_sign(ctx, &signature, &length, digest, digest.count) == 1 else {
            throw CryptoError.openSSL("signing")
        }
        signature.removeLast(signature.count - length)
        if kind == .ecP256 {
            return try ECDSASignature.rawFromDER(signature)
        }
        return signature
    }

    /// Verifies a JWS signature over `message`; every malformed or wrong signature is simply `false`.
    package func verify<Sig: Collection, Bytes: Collection>(signature: Sig, message: Bytes) -> Bool
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
            return verifyEd25519(signature: sig, message: Array(message))
        }
        let digest = Digest.sha256(Array(message))
        guard let ctx = try? takeContext(signing: false) else { return false }
        defer {
            giveBack(ctx, signing: false)
            ERR_clear_error()
        }
        return EVP_PKEY_verify(ctx, sig, sig.count, digest, digest.count) == 1
    }

    // ES256 and RS256 sign a SHA-256 digest through an EVP_PKEY_CTX prepared once and reused (as
    // `openssl speed` does): setting a context up costs about as much as an ECDSA signature itself in
    // OpenSSL 3. Each context is held by one operation at a time.

    private func takeContext(signing: Bool) throws -> OpaquePointer {
        if let pooled = popContext(signing: signing) { return pooled }
        guard let ctx = EVP_PKEY_CTX_new_from_pkey(nil, pkey, nil) else { throw CryptoError.openSSL("context") }
        let ready =
            (signing ? EVP_PKEY_sign_init(ctx) : EVP_PKEY_verify_init(ctx)) == 1
            && EVP_PKEY_CTX_set_signature_md(ctx, DigestAlgorithm.sha256.evp) == 1
        guard ready else {
            EVP_PKEY_CTX_free(ctx)
            throw CryptoError.openSSL("context")
        }
        return ctx
    }

    private func popContext(signing: Bool) -> OpaquePointer? {
        withPool(signing: signing) { $0.popLast() }?.pointer
    }

    /// Returns a context to its pool, or frees it (with the free function of its type) when the pool is full.
    private func giveBack(_ ctx: OpaquePointer, signing: Bool) {
        let kept = withPool(signing: signing) { contexts -> Bool in
            guard contexts.count < 16 else { return false }
            contexts.append(ContextHandle(pointer: ctx))
            return true
        }
        guard !kept else { return }
        if kind == .ed25519 { EVP_MD_CTX_free(ctx) } else { EVP_PKEY_CTX_free(ctx) }
    }

    private func withPool<R: Sendable>(signing: Bool, _ body: (inout sending [ContextHandle]) -> sending R) -> R {
        signing ? signContexts.withLock(body) : verifyContexts.withLock(body)
    }

    // Ed25519 has no prehash form, so it goes through EVP_DigestSign; its EVP_MD_CTXs are pooled the same way
    // and re-initialised per message, which skips the allocation.

    private func takeMDContext(signing: Bool) throws -> OpaquePointer {
        if let pooled = popContext(signing: signing) { return pooled }
        guard let ctx = EVP_MD_CTX_new() else { throw CryptoError.openSSL("context") }
        return ctx
    }

    private func signEd25519(_ input: [UInt8]) throws -> [UInt8] {
        let ctx = try takeMDContext(signing: true)
        defer { giveBack(ctx, signing: true) }
        guard EVP_DigestSignInit(ctx, nil, nil, nil, pkey) == 1 else { throw CryptoError.openSSL("signing") }
        var length = 64
        var signature = [UInt8](repeating: 0, count: 64)
        guard EVP_DigestSign(ctx, &signature, &length, input, input.count) == 1, length == 64 else {
            throw CryptoError.openSSL("signing")
        }
        return signature
    }

    private func verifyEd25519(signature: [UInt8], message: [UInt8]) -> Bool {
        guard let ctx = try? takeMDContext(signing: false) else { return false }
        defer {
            giveBack(ctx, signing: false)
            ERR_clear_error()
        }
        guard EVP_DigestVerifyInit(ctx, nil, nil, nil, pkey) == 1 else { return false }
        return EVP_DigestVerify(ctx, signature, signature.count, message, message.count) == 1
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
