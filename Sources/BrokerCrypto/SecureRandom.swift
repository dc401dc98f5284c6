internal import COpenSSL

/// Cryptographically secure random bytes from OpenSSL's DRBG.
package enum SecureRandom {
    /// Returns `count` random bytes.
    ///
    /// - Throws: ``CryptoError`` when the DRBG cannot be seeded; callers must not fall back to anything weaker.
    package static func bytes(_ count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        guard count > 0 else { return out }
        let ok = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) }
        guard ok == 1 else { throw CryptoError.openSSL("RAND_bytes") }
        return out
    }

    /// A random token of `byteCount` bytes, base64url-encoded (no padding): 32 bytes give 256 bits.
    package static func token(byteCount: Int = 32) throws -> String {
        Base64URL.encode(try bytes(byteCount))
    }
}
