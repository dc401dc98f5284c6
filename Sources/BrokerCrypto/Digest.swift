internal import COpenSSL
import Synchronization

/// The SHA-2 digests the broker uses, via OpenSSL's EVP interface.
package enum DigestAlgorithm: Sendable {
    case sha1
    case sha256
    case sha384
    case sha512

    var name: String {
        switch self {
        case .sha1: "SHA1"
        case .sha256: "SHA256"
        case .sha384: "SHA384"
        case .sha512: "SHA512"
        }
    }

    /// The digest fetched once from the default provider: OpenSSL 3 otherwise re-fetches it (a locked
    /// property query) on every `EVP_sha256()` use, which shows up next to a signature's cost.
    var evp: OpaquePointer? {
        switch self {
        case .sha1: FetchedDigests.sha1.pointer
        case .sha256: FetchedDigests.sha256.pointer
        case .sha384: FetchedDigests.sha384.pointer
        case .sha512: FetchedDigests.sha512.pointer
        }
    }
}

/// EVP_MD objects fetched once and kept for the life of the process (immutable, safe to share).
private struct FetchedDigest: @unchecked Sendable {
    let pointer: OpaquePointer?
    init(_ name: String) { pointer = EVP_MD_fetch(nil, name, nil) }
}

private enum FetchedDigests {
    static let sha1 = FetchedDigest("SHA1")
    static let sha256 = FetchedDigest("SHA256")
    static let sha384 = FetchedDigest("SHA384")
    static let sha512 = FetchedDigest("SHA512")
}

package enum Digest {
    /// Hashes `data` with `algorithm`.
    package static func hash<Bytes: Collection>(_ algorithm: DigestAlgorithm, _ data: Bytes) -> [UInt8]
    where Bytes.Element == UInt8 {
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let input = Array(data)
        let ok = input.withUnsafeBytes { inputBuffer in
            EVP_Digest(inputBuffer.baseAddress, inputBuffer.count, &out, &length, algorithm.evp, nil)
        }
        // EVP_Digest on a built-in digest fails only when memory runs out.
        precondition(ok == 1, "EVP_Digest failed")
        return Array(out.prefix(Int(length)))
    }

    package static func sha256<Bytes: Collection>(_ data: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        hash(.sha256, data)
    }

    package static func sha256(_ text: String) -> [UInt8] { hash(.sha256, Array(text.utf8)) }
}

package enum HMAC {
    /// HMAC of `data` under `key` (RFC 2104) with the given digest; SHA-1 is here only for OAuth 1.0a.
    package static func authenticate<Key: Collection, Bytes: Collection>(
        _ algorithm: DigestAlgorithm, key: Key, data: Bytes
    ) -> [UInt8] where Key.Element == UInt8, Bytes.Element == UInt8 {
        let keyBytes = Array(key)
        let input = Array(data)
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var outLength = 0
        let result = keyBytes.withUnsafeBytes { keyBuffer in
            input.withUnsafeBytes { inputBuffer in
                EVP_Q_mac(
                    nil, "HMAC", nil, algorithm.name, nil,
                    // A zero-length key must still be a valid pointer for OpenSSL.
                    keyBuffer.baseAddress ?? UnsafeRawPointer(bitPattern: 1), keyBuffer.count,
                    inputBuffer.baseAddress?.assumingMemoryBound(to: UInt8.self), inputBuffer.count,
                    &out, out.count, &outLength)
            }
        }
        precondition(result != nil, "EVP_Q_mac failed")
        return Array(out.prefix(outLength))
    }
}

/// An HMAC key made ready once, for a key that signs many messages (the client-secret hasher's): OpenSSL's
/// `EVP_Q_mac`, behind ``HMAC/authenticate(_:key:data:)``, fetches the MAC and its digest by name and sets the key
/// at every call, ~20,000 instructions of each CI mint under callgrind; a copy of a keyed context is a fraction.
///
/// Used contexts are kept (a ``ContextPool``) and started again with the same key (`EVP_MAC_init` without a key
/// starts over from the keyed state): copying a context and freeing it after one message cost 4,276 instructions a
/// mint under callgrind, most of it OpenSSL's allocations.
package final class HMACKey: Sendable {
    /// The keyed context, only ever copied (under the lock: OpenSSL does not promise a context may be read by
    /// two threads at once).
    private let keyed: Mutex<ContextHandle>
    /// Copies of it that have been used, each held by one caller at a time.
    private let spare = ContextPool(free: { EVP_MAC_CTX_free($0) })

    package init(_ algorithm: DigestAlgorithm, key: [UInt8]) {
        let pointer = key.withUnsafeBufferPointer { broker_hmac_keyed(algorithm.name, $0.baseAddress, $0.count) }
        // Keying a built-in MAC fails only when memory runs out.
        guard let pointer else { preconditionFailure("HMAC key set-up failed") }
        keyed = Mutex(ContextHandle(pointer: pointer))
    }

    deinit {
        keyed.withLock { EVP_MAC_CTX_free($0.pointer) }
    }

    /// HMAC of `data` under this key.
    package func authenticate(_ data: [UInt8]) -> [UInt8] {
        let context: OpaquePointer
        if let kept = spare.take() {
            context = kept
        } else {
            guard let copy = keyed.withLock({ EVP_MAC_CTX_dup($0.pointer) }) else {
                preconditionFailure("EVP_MAC_CTX_dup failed")
            }
            context = copy
        }
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length = 0
        let ok = data.withUnsafeBufferPointer { input in
            // No key: the context starts over with the one it holds (a fresh copy is already started).
            EVP_MAC_init(context, nil, 0, nil) == 1
                && EVP_MAC_update(context, input.baseAddress, input.count) == 1
                && EVP_MAC_final(context, &out, &length, out.count) == 1
        }
        precondition(ok, "HMAC failed")
        spare.giveBack(context)
        out.removeLast(out.count - length)
        return out
    }
}

package enum ConstantTime {
    /// Compares two byte strings in time that depends only on their lengths.
    ///
    /// Use for every comparison of a secret (state, code, token hash, client secret).
    package static func equals<A: Collection, B: Collection>(_ lhs: A, _ rhs: B) -> Bool
    where A.Element == UInt8, B.Element == UInt8 {
        let left = Array(lhs)
        let right = Array(rhs)
        guard left.count == right.count else { return false }
        if left.isEmpty { return true }
        return left.withUnsafeBytes { l in
            right.withUnsafeBytes { r in CRYPTO_memcmp(l.baseAddress, r.baseAddress, l.count) == 0 }
        }
    }

    package static func equals(_ lhs: String, _ rhs: String) -> Bool {
        equals(Array(lhs.utf8), Array(rhs.utf8))
    }
}

extension Array where Element == UInt8 {
    /// Lowercase hexadecimal.
    package var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(count * 2)
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
