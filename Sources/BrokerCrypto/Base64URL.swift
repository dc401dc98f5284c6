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
        String(decoding: encodeBytes(Array(data), alphabet: urlAlphabet, pad: false), as: UTF8.self)
    }

    package static func encode(_ text: String) -> String { encode(Array(text.utf8)) }

    /// Standard base64 with padding (RFC 4648 §4), as OAuth 1.0a signatures use.
    package static func encodeStandard<Bytes: Collection>(_ data: Bytes) -> String where Bytes.Element == UInt8 {
        String(decoding: encodeBytes(Array(data), alphabet: standardAlphabet, pad: true), as: UTF8.self)
    }

    private static func encodeBytes(_ input: [UInt8], alphabet: [UInt8], pad: Bool) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity((input.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= input.count {
            let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            out.append(alphabet[Int(chunk >> 18 & 0x3f)])
            out.append(alphabet[Int(chunk >> 12 & 0x3f)])
            out.append(alphabet[Int(chunk >> 6 & 0x3f)])
            out.append(alphabet[Int(chunk & 0x3f)])
            index += 3
        }
        let rest = input.count - index
        if rest == 1 {
            let chunk = UInt32(input[index]) << 16
            out.append(alphabet[Int(chunk >> 18 & 0x3f)])
            out.append(alphabet[Int(chunk >> 12 & 0x3f)])
            if pad { out.append(contentsOf: Array("==".utf8)) }
        } else if rest == 2 {
            let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            out.append(alphabet[Int(chunk >> 18 & 0x3f)])
            out.append(alphabet[Int(chunk >> 12 & 0x3f)])
            out.append(alphabet[Int(chunk >> 6 & 0x3f)])
            if pad { out.append(UInt8(ascii: "=")) }
        }
        return out
    }

    /// Decodes strict unpadded base64url; `nil` for anything an encoder could not have produced.
    package static func decode<Chars: Collection>(_ text: Chars) -> [UInt8]? where Chars.Element == UInt8 {
        let input = Array(text)
        if input.count % 4 == 1 { return nil }
        var out = [UInt8]()
        out.reserveCapacity(input.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for char in input {
            let value = decodeTable[Int(char)]
            if value == 0xff { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
        }
        // Leftover bits must be zero, or two spellings would decode to the same bytes.
        if bits > 0 && accumulator != 0 { return nil }
        return out
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

    package static func decode(_ text: String) -> [UInt8]? { decode(Array(text.utf8)) }
    package static func decode(_ text: Substring) -> [UInt8]? { decode(Array(text.utf8)) }
}
