/// Strict UTF-8 decoding for the parsers on the request path (JSON, forms, HTTP Basic).
///
/// `String(validating:as:)` gives the same answer, but in Swift 6's standard library it reaches the
/// validation through an unspecialised generic function that looks up its result type's metadata at every
/// call: ~1,200 instructions a string under callgrind, ~25,000 of a `GET /auth/me` for the JWT's header and
/// claims. Here the bytes are decoded by the standard library's non-generic UTF-8 path, which replaces any
/// invalid sequence with U+FFFD; the result is always valid UTF-8, so it has the very bytes it was given only
/// when they were valid UTF-8 already.
package enum UTF8Text {
    /// The text of `bytes`, or `nil` when they are not valid UTF-8.
    package static func validated(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        // ASCII, nearly every string on the wire (a token's claims, a form's fields), is UTF-8 as it is: decoded
        // without the comparison, which for a short string (stored inline, no contiguous view) walked its UTF-8
        // view generically (~8,000 instructions of the 26 strings of a `GET /auth/me` under callgrind).
        if bytes.allSatisfy({ $0 < 0x80 }) { return String(decoding: bytes, as: UTF8.self) }
        let text = String(decoding: bytes, as: UTF8.self)
        let unchanged =
            text.utf8.withContiguousStorageIfAvailable { stored in stored.elementsEqual(bytes) }
            ?? text.utf8.elementsEqual(bytes)
        return unchanged ? text : nil
    }

    /// The text of `bytes`, or `nil` when they are not valid UTF-8.
    package static func validated(_ bytes: [UInt8]) -> String? {
        bytes.withUnsafeBufferPointer { validated($0) }
    }
}
