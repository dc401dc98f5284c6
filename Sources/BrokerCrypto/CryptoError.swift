internal import COpenSSL

/// A failure inside the crypto layer: bad key material, an OpenSSL call that failed, a malformed input.
///
/// A struct over a private code so that new cases never break callers (STYLE.md 5); `==` compares codes.
package struct CryptoError: Error, Sendable, Equatable, CustomStringConvertible {
    enum Code: String, Sendable {
        case openSSL
        case invalidKey
        case unsupportedKey
        case weakKey
        case invalidEncoding
        case invalidParameters
        case randomFailure
    }

    let code: Code
    /// What went wrong, in words fit for a log or a command's error message (never key material).
    package let reason: String

    init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    package static func == (lhs: CryptoError, rhs: CryptoError) -> Bool { lhs.code == rhs.code }

    package var description: String { reason }

    /// A short, bounded label for metrics.
    package var shortDescription: String { code.rawValue }

    package static let invalidKey = CryptoError(.invalidKey, "invalid key")
    package static let unsupportedKey = CryptoError(.unsupportedKey, "unsupported key")
    package static let weakKey = CryptoError(.weakKey, "key too weak")
    package static let invalidEncoding = CryptoError(.invalidEncoding, "invalid encoding")
    package static let invalidParameters = CryptoError(.invalidParameters, "invalid parameters")

    static func invalidKey(_ reason: String) -> CryptoError { CryptoError(.invalidKey, reason) }
    static func unsupportedKey(_ reason: String) -> CryptoError { CryptoError(.unsupportedKey, reason) }
    static func weakKey(_ reason: String) -> CryptoError { CryptoError(.weakKey, reason) }
    static func invalidEncoding(_ reason: String) -> CryptoError { CryptoError(.invalidEncoding, reason) }
    static func invalidParameters(_ reason: String) -> CryptoError { CryptoError(.invalidParameters, reason) }

    /// Drains OpenSSL's thread-local error queue into one message (STYLE.md 3).
    static func openSSL(_ operation: String) -> CryptoError {
        var messages: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            messages.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        let detail = messages.isEmpty ? "" : ": " + messages.joined(separator: "; ")
        return CryptoError(.openSSL, "\(operation) failed\(detail)")
    }
}
