/// Base64 with the URL- and filename-safe alphabet and no padding (RFC 4648 §5, RFC 7515 §2).
///
/// The decoder is strict: it refuses padding, whitespace, characters outside the alphabet, a length that
/// cannot come from an encoder, and non-canonical trailing bits, so every byte string has exactly one
/// accepted encoding (a signature or a token cannot be "malleated" into a second valid spelling).
package enum Base64URL {
    private static let urlAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let standardAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xff, count: 256)
        for (index, char) in urlAlphabet.enumerated() { table[Int(char)] = UInt8(index) }
        return table
    }()

    package static func encode<Bytes: Collection>(_ data: Bytes) -> String where Bytes.Element == UInt8 {
        String(decoding: encodeBytes(data, alphabet: urlAlphabet, pad: false), as: UTF8.self)
    }

    package static func encode(_ text: String) -> String { encode(text.utf8) }

    /// The same encoding as ASCII bytes, for a caller that puts several encodings into one buffer (a JWS).
    package static func encodedBytes<Bytes: Collection>(_ data: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        encodeBytes(data, alphabet: urlAlphabet, pad: false)
    }

    /// Standard base64 with padding (RFC 4648 §4), as OAuth 1.0a signatures use.
    package static func encodeStandard<Bytes: Collection>(_ data: Bytes) -> String where Bytes.Element == UInt8 {
        String(decoding: encodeBytes(data, alphabet: standardAlphabet, pad: true), as: UTF8.self)
    }

    // Both directions work on the bytes' own storage and write into an output allocated once at its final size,
    // three bytes to four characters at a time, with the table read through one pointer: JWTs are base64url
    // three times over, and a byte-at-a-time loop that appended (and went through the table's lazy global at
    // every character) was ~34,000 instructions of a `GET /auth/me` under callgrind.

    private static func encodeBytes<Bytes: Collection>(_ data: Bytes, alphabet: [UInt8], pad: Bool) -> [UInt8]
    where Bytes.Element == UInt8 {
        if let encoded = data.withContiguousStorageIfAvailable({ encodeBytes(buffer: $0, alphabet: alphabet, pad: pad) }
        ) {
            return encoded
        }
        return Array(data).withUnsafeBufferPointer { encodeBytes(buffer: $0, alphabet: alphabet, pad: pad) }
    }

    private static func encodeBytes(buffer input: UnsafeBufferPointer<UInt8>, alphabet: [UInt8], pad: Bool) -> [UInt8] {
        let whole = input.count / 3
        let rest = input.count % 3
        let count = whole * 4 + (rest == 0 ? 0 : pad ? 4 : rest + 1)
        return [UInt8](unsafeUninitializedCapacity: count) { out, initialized in
            alphabet.withUnsafeBufferPointer { alphabet in
                var index = 0
                var written = 0
                while index + 3 <= input.count {
                    let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
                    out[written] = alphabet[Int(chunk >> 18 & 0x3f)]
                    out[written + 1] = alphabet[Int(chunk >> 12 & 0x3f)]
                    out[written + 2] = alphabet[Int(chunk >> 6 & 0x3f)]
                    out[written + 3] = alphabet[Int(chunk & 0x3f)]
                    index += 3
                    written += 4
                }
                if rest > 0 {
                    let chunk = UInt32(input[index]) << 16 | (rest == 2 ? UInt32(input[index + 1]) << 8 : 0)
                    out[written] = alphabet[Int(chunk >> 18 & 0x3f)]
                    out[written + 1] = alphabet[Int(chunk >> 12 & 0x3f)]
                    written += 2
                    if rest == 2 {
                        out[written] = alphabet[Int(chunk >> 6 & 0x3f)]
                        written += 1
                    }
                    while pad, written < count {
                        out[written] = UInt8(ascii: "=")
                        written += 1
                    }
                }
                initialized = written
            }
        }
    }

    /// Decodes strict unpadded base64url; `nil` for anything an encoder could not have produced.
    package static func decode<Chars: Collection>(_ text: Chars) -> [UInt8]? where Chars.Element == UInt8 {
        if let decoded = text.withContiguousStorageIfAvailable({ decode(buffer: $0) }) { return decoded }
        return Array(text).withUnsafeBufferPointer { decode(buffer: $0) }
    }

    private static func decode(buffer input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let rest = input.count % 4
        // One character left over cannot come from an encoder (it carries 6 bits, not a byte).
        if rest == 1 { return nil }
        let count = input.count / 4 * 3 + (rest == 0 ? 0 : rest - 1)
        var valid = true
        let out = [UInt8](unsafeUninitializedCapacity: count) { out, initialized in
            decodeTable.withUnsafeBufferPointer { table in
                // Every character outside the alphabet is 0xff in the table: one test of the high bit per group.
                var index = 0
                var written = 0
                while index + 4 <= input.count {
                    let a = table[Int(input[index])]
                    let b = table[Int(input[index + 1])]
                    let c = table[Int(input[index + 2])]
                    let d = table[Int(input[index + 3])]
                    guard (a | b | c | d) & 0x80 == 0 else {
                        valid = false
                        return
                    }
                    let chunk = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    out[written] = UInt8(truncatingIfNeeded: chunk >> 16)
                    out[written + 1] = UInt8(truncatingIfNeeded: chunk >> 8)
                    out[written + 2] = UInt8(truncatingIfNeeded: chunk)
                    index += 4
                    written += 3
                }
                if rest > 1 {
                    let a = table[Int(input[index])]
                    let b = table[Int(input[index + 1])]
                    let c = rest == 3 ? table[Int(input[index + 2])] : 0
                    // Leftover bits must be zero, or two spellings would decode to the same bytes.
                    let leftover = rest == 3 ? c & 0x03 : b & 0x0f
                    guard (a | b | c) & 0x80 == 0, leftover == 0 else {
                        valid = false
                        return
                    }
                    out[written] = a << 2 | b >> 4
                    written += 1
                    if rest == 3 {
                        out[written] = (b & 0x0f) << 4 | c >> 2
                        written += 1
                    }
                }
                initialized = written
            }
        }
        return valid ? out : nil
    }

    /// Decodes standard base64 (RFC 4648 §4, `+` and `/`), as HTTP Basic authentication carries it: padding
    /// is optional but must be right when present; otherwise as strict as ``decode(_:)-swift.method``.
    package static func decodeStandard(_ text: String) -> [UInt8]? {
        var input = Array(text.utf8)
        var padding = 0
        while input.last == UInt8(ascii: "=") {
            input.removeLast()
            padding += 1
        }
        if padding > 0 && (padding > 2 || (input.count + padding) % 4 != 0) { return nil }
        for index in input.indices {
            switch input[index] {
            case UInt8(ascii: "+"): input[index] = UInt8(ascii: "-")
            case UInt8(ascii: "/"): input[index] = UInt8(ascii: "_")
            case UInt8(ascii: "-"), UInt8(ascii: "_"): return nil
            default: break
            }
        }
        return decode(input)
    }

    package static func decode(_ text: String) -> [UInt8]? { decode(text.utf8) }
    package static func decode(_ text: Substring) -> [UInt8]? { decode(text.utf8) }
}
