#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension JSONValue {
    /// Compact JSON with object members in lexicographic (UTF-16 code unit) order and `/` unescaped.
    ///
    /// Deterministic output keeps signed tokens and fixtures stable from run to run.
    public func serialized() -> String {
        var out = ""
        write(into: &out)
        return out
    }

    public var serializedBytes: [UInt8] { Array(serialized().utf8) }

    private func write(into out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let value): out += value ? "true" : "false"
        case .int(let value): out += String(value)
        case .double(let value):
            if value.isFinite {
                if value.rounded(.towardZero) == value, abs(value) < 1e15 {
                    out += String(Int64(value))
                } else {
                    out += "\(value)"
                }
            } else {
                out += "null"
            }
        case .string(let value): JSONValue.writeString(value, into: &out)
        case .array(let values):
            out += "["
            for (index, value) in values.enumerated() {
                if index > 0 { out += "," }
                value.write(into: &out)
            }
            out += "]"
        case .object(let members):
            out += "{"
            for (index, key) in members.keys.sorted(by: { $0.utf16.lexicographicallyPrecedes($1.utf16) }).enumerated() {
                if index > 0 { out += "," }
                JSONValue.writeString(key, into: &out)
                out += ":"
                members[key]?.write(into: &out)
            }
            out += "}"
        }
    }

    private static func writeString(_ value: String, into out: inout String) {
        out += "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
    }

    /// Parses a JSON document strictly (see ``JSONParser``); `nil` when it is not valid JSON.
    public static func parse<Bytes: Collection>(_ bytes: Bytes) -> JSONValue? where Bytes.Element == UInt8 {
        JSONParser.parse(Array(bytes))
    }

    /// Parses a JSON document strictly, saying where and why it is not valid JSON.
    public static func parseReportingError<Bytes: Collection>(
        _ bytes: Bytes
    ) -> Result<JSONValue, JSONSyntaxError> where Bytes.Element == UInt8 {
        JSONParser.parseReportingError(Array(bytes))
    }
}
