/// A strict JSON parser (RFC 8259) producing ``JSONValue``.
///
/// Written here rather than going through `JSONDecoder` because tokens are parsed on every request and the
/// generic decoder costs more than the signature check; it is also stricter where JOSE wants it: duplicate
/// object members are rejected (RFC 7515 §5.2 allows rejecting them), nesting is bounded, and invalid UTF-8
/// or a lone surrogate escape is an error rather than a replacement character.
struct JSONParser {
    private let bytes: [UInt8]
    private var index = 0
    private var depth = 0
    /// Why parsing stopped, when the reason is more specific than a syntax error at `index`.
    private var reason: String?
    static let maxDepth = 64

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    static func parse(_ bytes: [UInt8]) -> JSONValue? {
        try? parseReportingError(bytes).get()
    }

    static func parseReportingError(_ bytes: [UInt8]) -> Result<JSONValue, JSONSyntaxError> {
        var parser = JSONParser(bytes)
        guard let value = parser.parseValue() else { return .failure(parser.failure()) }
        parser.skipWhitespace()
        guard parser.index == bytes.count else {
            return .failure(JSONSyntaxError(offset: parser.index, reason: "unexpected data after the JSON value"))
        }
        return .success(value)
    }

    private func failure() -> JSONSyntaxError {
        if let reason { return JSONSyntaxError(offset: index, reason: reason) }
        if index >= bytes.count { return JSONSyntaxError(offset: index, reason: "unexpected end of input") }
        return JSONSyntaxError(offset: index, reason: "invalid JSON")
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func parseValue() -> JSONValue? {
        skipWhitespace()
        guard index < bytes.count else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "{"): return parseObject()
        case UInt8(ascii: "["): return parseArray()
        case UInt8(ascii: "\""): return parseString().map(JSONValue.string)
        case UInt8(ascii: "t"): return literal("true", .bool(true))
        case UInt8(ascii: "f"): return literal("false", .bool(false))
        case UInt8(ascii: "n"): return literal("null", .null)
        default: return parseNumber()
        }
    }

    private mutating func literal(_ word: StaticString, _ value: JSONValue) -> JSONValue? {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count else { return nil }
        let matches = word.withUTF8Buffer { Array($0) == Array(bytes[index..<index + count]) }
        guard matches else { return nil }
        index += count
        return value
    }

    private mutating func parseObject() -> JSONValue? {
        depth += 1
        defer { depth -= 1 }
        guard depth <= JSONParser.maxDepth else {
            reason = "nesting deeper than \(JSONParser.maxDepth)"
            return nil
        }
        index += 1
        var members: [String: JSONValue] = [:]
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        // Room for a token's header or claims at once: growing from empty re-hashed every member at each doubling
        // (~7,000 instructions of a `GET /auth/me` under callgrind).
        members.reserveCapacity(8)
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), let key = parseString() else { return nil }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
            index += 1
            guard let value = parseValue() else { return nil }
            guard members.updateValue(value, forKey: key) == nil else {
                reason = "duplicate member \"\(key.prefix(64))\""
                return nil
            }
            skipWhitespace()
            guard index < bytes.count else { return nil }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            } else {
                return nil
            }
        }
    }

    private mutating func parseArray() -> JSONValue? {
        depth += 1
        defer { depth -= 1 }
        guard depth <= JSONParser.maxDepth else {
            reason = "nesting deeper than \(JSONParser.maxDepth)"
            return nil
        }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            guard let value = parseValue() else { return nil }
            elements.append(value)
            skipWhitespace()
            guard index < bytes.count else { return nil }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            } else {
                return nil
            }
        }
    }

    private mutating func parseString() -> String? {
        index += 1
        let start = index
        // Fast path: no escapes. The string's end, an escape or a control byte (which JSON does not allow
        // unescaped) is found eight bytes at a time, as the writer finds what it must escape: byte by byte, the
        // claims of a `GET /auth/me` took ~4,800 instructions under callgrind.
        index = bytes.withUnsafeBufferPointer { JSONValue.firstToEscape($0, from: start) }
        if index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                // Validated from the array's own storage (``UTF8Text``): over an ArraySlice,
                // String(validating:as:) takes the generic, byte-at-a-time path.
                let end = index
                let text = bytes.withUnsafeBufferPointer {
                    UTF8Text.validated(UnsafeBufferPointer(rebasing: $0[start..<end]))
                }
                index += 1
                return text
            }
            if byte < 0x20 { return nil }
        }
        var out = Array(bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                return UTF8Text.validated(out)
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { return nil }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    guard var scalar = parseHex4() else { return nil }
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { return nil }
                        index += 2
                        guard let low = parseHex4(), (0xDC00...0xDFFF).contains(low) else { return nil }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        return nil
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { return nil }
                    out.append(contentsOf: Array(String(Character(unicode)).utf8))
                default:
                    return nil
                }
            default:
                if byte < 0x20 { return nil }
                out.append(byte)
                index += 1
            }
        }
        return nil
    }

    private mutating func parseHex4() -> UInt32? {
        guard index + 4 <= bytes.count else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = bytes[index].asciiHexValue else { return nil }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    private mutating func parseNumber() -> JSONValue? {
        let start = index
        if index < bytes.count && bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { return nil }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(bytes[index]) {
            while index < bytes.count && bytes[index].isASCIIDigit { index += 1 }
        } else {
            return nil
        }
        var isInteger = true
        if index < bytes.count && bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let digits = index
            while index < bytes.count && bytes[index].isASCIIDigit { index += 1 }
            guard index > digits else { return nil }
        }
        if index < bytes.count && (bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E")) {
            isInteger = false
            index += 1
            if index < bytes.count && (bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-")) {
                index += 1
            }
            let digits = index
            while index < bytes.count && bytes[index].isASCIIDigit { index += 1 }
            guard index > digits else { return nil }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if isInteger, let value = Int64(text) { return .int(value) }
        guard let value = Double(text), value.isFinite else { return nil }
        return .double(value)
    }
}

/// Where and why a document is not valid JSON.
package struct JSONSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The byte offset at which parsing stopped.
    package let offset: Int
    package let reason: String

    package var description: String { "\(reason) at byte \(offset)" }
}
