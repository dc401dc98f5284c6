extension JSONValue {
    /// Compact JSON with object members in lexicographic (UTF-16 code unit) order and `/` unescaped.
    ///
    /// Deterministic output keeps signed tokens and fixtures stable from run to run.
    package func serialized() -> String {
        String(decoding: serializedBytes, as: UTF8.self)
    }

    /// The same document as UTF-8 bytes, written byte by byte: escapes only ever apply to ASCII, so the
    /// UTF-8 of a string is copied through and only `"`, `\\` and control bytes are rewritten.
    package var serializedBytes: [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(256)
        write(into: &out)
        return out
    }

    private func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let value): out.append(contentsOf: (value ? "true" : "false").utf8)
        case .int(let value): out.append(contentsOf: String(value).utf8)
        case .double(let value):
            if value.isFinite {
                if value.rounded(.towardZero) == value, abs(value) < 1e15 {
                    out.append(contentsOf: String(Int64(value)).utf8)
                } else {
                    out.append(contentsOf: "\(value)".utf8)
                }
            } else {
                out.append(contentsOf: "null".utf8)
            }
        case .string(let value): JSONValue.writeString(value, into: &out)
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                value.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            // The members themselves are sorted, so no value is looked up again by its key.
            let sorted = members.sorted { JSONValue.utf16Precedes($0.key, $1.key) }
            for (index, member) in sorted.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONValue.writeString(member.key, into: &out)
                out.append(UInt8(ascii: ":"))
                member.value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// Whether `a` sorts before `b` in UTF-16 code unit order (the order of JWS and RFC 7638 examples), read
    /// from the strings' UTF-8 without walking their UTF-16 views.
    ///
    /// UTF-8 byte order is code point order, and so is UTF-16's except for one pair of ranges: a character
    /// above U+FFFF (UTF-8 lead byte F0–F4) is a surrogate pair from 0xD800 in UTF-16, so it sorts before
    /// U+E000–U+FFFF (lead bytes EE, EF). Up to the first differing byte both strings hold the same
    /// characters, so that byte is either a lead byte of both or a continuation byte of two characters with
    /// the same lead byte, whose orders agree.
    package static func utf16Precedes(_ a: String, _ b: String) -> Bool {
        var a = a
        var b = b
        return a.withUTF8 { x in
            b.withUTF8 { y in
                let common = min(x.count, y.count)
                var index = 0
                while index < common, x[index] == y[index] { index += 1 }
                guard index < common else { return x.count < y.count }
                let p = x[index]
                let q = y[index]
                if p >= 0xF0, q == 0xEE || q == 0xEF { return true }
                if q >= 0xF0, p == 0xEE || p == 0xEF { return false }
                return p < q
            }
        }
    }

    private static func writeString(_ value: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { bytes in
            // Runs of bytes that need no escape (nearly every byte of a token's claims) are copied whole.
            var start = 0
            for index in bytes.indices {
                let byte = bytes[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                if start < index { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index])) }
                escape(byte, into: &out)
                start = index + 1
            }
            if start < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...])) }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// The escape of a quote, a backslash or a control character.
    private static func escape(_ byte: UInt8, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): out.append(byte)
        case 0x0A: out.append(UInt8(ascii: "n"))
        case 0x0D: out.append(UInt8(ascii: "r"))
        case 0x09: out.append(UInt8(ascii: "t"))
        case 0x08: out.append(UInt8(ascii: "b"))
        case 0x0C: out.append(UInt8(ascii: "f"))
        default:
            out.append(UInt8(ascii: "u"))
            out.append(UInt8(ascii: "0"))
            out.append(UInt8(ascii: "0"))
            out.append(hexDigits[Int(byte >> 4)])
            out.append(hexDigits[Int(byte & 0x0F)])
        }
    }

    /// Parses a JSON document strictly (see ``JSONParser``); `nil` when it is not valid JSON.
    package static func parse<Bytes: Collection>(_ bytes: Bytes) -> JSONValue? where Bytes.Element == UInt8 {
        JSONParser.parse(Array(bytes))
    }

    /// Parses a JSON document strictly, saying where and why it is not valid JSON.
    package static func parseReportingError<Bytes: Collection>(
        _ bytes: Bytes
    ) -> Result<JSONValue, JSONSyntaxError> where Bytes.Element == UInt8 {
        JSONParser.parseReportingError(Array(bytes))
    }
}
