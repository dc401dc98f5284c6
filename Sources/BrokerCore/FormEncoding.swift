/// Percent-encoding and `application/x-www-form-urlencoded` bodies and queries.
package enum FormEncoding {
    /// Percent-encodes everything but RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`).
    ///
    /// This is also OAuth 1.0a's encoding (RFC 5849 §3.6): uppercase hex, UTF-8 first, space as `%20`.
    package static func percentEncode(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out = [UInt8]()
        out.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            if byte.isURIUnreserved {
                out.append(byte)
            } else {
                out.append(UInt8(ascii: "%"))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0x0f)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes `%XX` escapes (and `+` as space when `plusIsSpace`); `nil` on a broken escape or invalid UTF-8.
    package static func percentDecode(_ text: Substring, plusIsSpace: Bool = true) -> String? {
        var text = text
        return text.withUTF8 { percentDecode(bytes: $0, plusIsSpace: plusIsSpace) }
    }

    /// ``percentDecode(_:plusIsSpace:)`` on bytes as they arrived (HTTP Basic's decoded credentials).
    package static func percentDecode(bytes: UnsafeBufferPointer<UInt8>, plusIsSpace: Bool = true) -> String? {
        var out = [UInt8]()
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            if byte == UInt8(ascii: "%") {
                guard index + 1 < bytes.count, let high = bytes[index].asciiHexValue,
                    let low = bytes[index + 1].asciiHexValue
                else { return nil }
                out.append(high << 4 | low)
                index += 2
            } else if byte == UInt8(ascii: "+") && plusIsSpace {
                out.append(UInt8(ascii: " "))
            } else {
                out.append(byte)
            }
        }
        return UTF8Text.validated(out)
    }

    /// `k=v&k2=v2` with every name and value percent-encoded.
    package static func encode(_ fields: [(String, String)]) -> String {
        fields.map { percentEncode($0.0) + "=" + percentEncode($0.1) }.joined(separator: "&")
    }

    /// Parses a form body or query string; `nil` if any escape is broken or a name or value is not UTF-8.
    package static func decode(_ text: String) -> [(String, String)]? {
        decode(bytes: text.utf8)
    }

    /// ``decode(_:)`` on the bytes as they arrived.
    package static func decode<Bytes: Sequence<UInt8>>(bytes: Bytes) -> [(String, String)]? {
        decode(bytes: Array(bytes))
    }

    /// ``decode(_:)`` on a request body: one pass, each name and value percent-decoded into one buffer and
    /// checked as UTF-8 once (empty pairs skipped; a pair without `=` has an empty value; only the first `=` of
    /// a pair separates). Not generic: a generic parser called from another module steps through its bytes by
    /// protocol witness (~21,000 instructions of each form-encoded mint under callgrind).
    package static func decode(bytes: [UInt8]) -> [(String, String)]? {
        bytes.withUnsafeBufferPointer { decode(buffer: $0) }
    }

    private static func decode(buffer bytes: UnsafeBufferPointer<UInt8>) -> [(String, String)]? {
        var fields: [(String, String)] = []
        var buffer: [UInt8] = []
        buffer.reserveCapacity(64)
        var name: String?
        var inPair = false
        func endPair() -> Bool {
            guard inPair else { return true }
            guard let text = UTF8Text.validated(buffer) else { return false }
            if let name {
                fields.append((name, text))
            } else {
                fields.append((text, ""))
            }
            buffer.removeAll(keepingCapacity: true)
            name = nil
            inPair = false
            return true
        }
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "&"):
                guard endPair() else { return nil }
                continue
            case UInt8(ascii: "=") where name == nil:
                guard let text = UTF8Text.validated(buffer) else { return nil }
                name = text
                buffer.removeAll(keepingCapacity: true)
            case UInt8(ascii: "%"):
                guard index + 1 < bytes.count, let high = bytes[index].asciiHexValue,
                    let low = bytes[index + 1].asciiHexValue
                else { return nil }
                buffer.append(high << 4 | low)
                index += 2
            case UInt8(ascii: "+"):
                buffer.append(UInt8(ascii: " "))
            default:
                buffer.append(byte)
            }
            inPair = true
        }
        guard endPair() else { return nil }
        return fields
    }
}
