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
        signing ? signContexts.take() : verifyContexts.take()
    }

    /// Returns a context to its pool, which frees it when the pool is full.
    private func giveBack(_ ctx: OpaquePointer, signing: Bool) {
        if signing { signContexts.giveBack(ctx) } else { verifyContexts.giveBack(ctx) }
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
///
/// Written out here rather than through OpenSSL's `ECDSA_SIG`: the structure is two INTEGERs of at most 33 bytes
/// in a SEQUENCE, and going through `BIGNUM`s and OpenSSL's ASN.1 templates cost ~11,500 instructions of each
/// verification under callgrind (`GET /auth/me`) and ~2,700 of each signature (a mint). Only the canonical
/// (DER) form is read or written: minimal lengths, no negative numbers, no trailing bytes. OpenSSL's own
/// verification re-encodes what it parses and refuses anything else, so an encoding this type got wrong would
/// fail every verification that meets it.
package enum ECDSASignature {
    static let componentLength = 32

    /// `r || s` from a DER `ECDSA-Sig-Value`; throws for anything but the canonical encoding of two numbers of at
    /// most 32 bytes.
    package static func rawFromDER(_ der: [UInt8]) throws -> [UInt8] {
        // Made only when thrown: making it reads (and empties) OpenSSL's error queue, 1,156 instructions that
        // every signature paid under callgrind.
        func malformed() -> CryptoError { CryptoError.openSSL("ECDSA signature decoding") }
        // SEQUENCE, short-form length (the longest signature is 2 + 2 × 35 = 72 bytes), exactly the rest.
        guard der.count >= 8, der[0] == 0x30, der[1] < 0x80, Int(der[1]) == der.count - 2 else { throw malformed() }
        var raw = [UInt8](repeating: 0, count: 2 * componentLength)
        var offset = 2
        for component in 0..<2 {
            guard offset + 2 <= der.count, der[offset] == 0x02 else { throw malformed() }
            let length = Int(der[offset + 1])
            let start = offset + 2
            guard length >= 1, length <= componentLength + 1, start + length <= der.count else { throw malformed() }
            // Not negative; a leading zero only where the next byte's high bit needs it.
            guard der[start] & 0x80 == 0 else { throw malformed() }
            if length > 1, der[start] == 0, der[start + 1] & 0x80 == 0 { throw malformed() }
            let digits = der[start] == 0 && length > 1 ? start + 1..<start + length : start..<start + length
            guard digits.count <= componentLength else { throw malformed() }
            let end = (component + 1) * componentLength
            raw.replaceSubrange(end - digits.count..<end, with: der[digits])
            offset = start + length
        }
        guard offset == der.count else { throw malformed() }
        return raw
    }

    /// The DER `ECDSA-Sig-Value` of a 64-byte `r || s`; nil for any other length.
    package static func derFromRaw(_ raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 2 * componentLength else { return nil }
        var der: [UInt8] = [0x30, 0]
        der.reserveCapacity(2 + 2 * (3 + componentLength))
        for component in 0..<2 {
            let end = (component + 1) * componentLength
            var start = component * componentLength
            // Minimal: no leading zero bytes (zero itself keeps one), then a zero byte before a high bit, which
            // would otherwise make the INTEGER negative.
            while start < end - 1, raw[start] == 0 { start += 1 }
            let pad = raw[start] & 0x80 != 0
            der.append(0x02)
            der.append(UInt8(end - start + (pad ? 1 : 0)))
            if pad { der.append(0) }
            der.append(contentsOf: raw[start..<end])
        }
        der[1] = UInt8(der.count - 2)
        return der
    }
}
