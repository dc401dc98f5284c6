internal import COpenSSL
import Synchronization

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

    /// A random token like ``token(byteCount:)`` that never begins with `-`, for ids people pass to a command
    /// (a session id): argument parsers read a leading `-` as an option (`broker sessions revoke -x…` failed for
    /// about one id in 64). Drawn again until its first character is not `-`, so the ids are uniform over those
    /// that qualify (a mapped first character would make one letter twice as likely).
    package static func argumentSafeToken(byteCount: Int = 16) throws -> String {
        while true {
            let drawn = try token(byteCount: byteCount)
            if drawn.utf8.first != UInt8(ascii: "-") { return drawn }
        }
    }

    /// A random identifier of `byteCount` bytes (at most 64), base64url-encoded, for values that are public once
    /// used — a request id, a token's `jti` — and must only be unique and unguessable beforehand. Drawn from a
    /// block of the DRBG's output taken 4 KiB at a time: each call to the DRBG costs about 6,000 instructions
    /// however few bytes it gives, more than the rest of a constant document's answer. Never for a secret (a
    /// refresh token, a code, a key): those come from ``token(byteCount:)``, so that no secret waits in memory
    /// before it is made.
    package static func identifier(byteCount: Int = 16) throws -> String {
        precondition((1...64).contains(byteCount), "identifiers are 1 to 64 bytes")
        let drawn: [UInt8] = try identifierBlock.withLock { block in
            if block.used + byteCount > block.bytes.count {
                block = (try bytes(4096), 0)
            }
            defer { block.used += byteCount }
            return Array(block.bytes[block.used..<block.used + byteCount])
        }
        return Base64URL.encode(drawn)
    }

    private static let identifierBlock = Mutex<(bytes: [UInt8], used: Int)>(([], 0))
}
