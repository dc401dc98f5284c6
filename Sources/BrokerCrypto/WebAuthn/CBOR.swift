/// A CBOR data item (RFC 8949) as WebAuthn uses it: attestation objects, COSE keys, extension outputs.
///
/// Only what CTAP2's canonical encoding produces is read: definite lengths, integers, byte and text strings,
/// arrays, maps, `false`/`true`/`null`/`undefined`. Floats, tags and indefinite lengths never appear in what an
/// authenticator sends and are refused, as is anything nested deeper than ``CBORReader/maxDepth``.
package enum CBOR: Sendable, Equatable {
    case unsigned(UInt64)
    /// The negative integer `-1 - n`.
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBOR])
    /// Entries in the order they were read (duplicate keys are refused by the reader).
    case map([Entry])
    case bool(Bool)
    case null
    case undefined

    package struct Entry: Sendable, Equatable {
        package var key: CBOR
        package var value: CBOR
        package init(_ key: CBOR, _ value: CBOR) {
            self.key = key
            self.value = value
        }
    }

    /// The integer, when it fits an `Int`.
    package var intValue: Int? {
        switch self {
        case .unsigned(let n): n <= UInt64(Int.max) ? Int(n) : nil
        case .negative(let n): n < UInt64(Int.max) ? -1 - Int(n) : nil
        default: nil
        }
    }

    package var bytesValue: [UInt8]? {
        if case .bytes(let bytes) = self { return bytes }
        return nil
    }

    package var textValue: String? {
        if case .text(let text) = self { return text }
        return nil
    }

    package var arrayValue: [CBOR]? {
        if case .array(let items) = self { return items }
        return nil
    }

    package var mapValue: [Entry]? {
        if case .map(let entries) = self { return entries }
        return nil
    }

    /// The value under integer key `key` of a map.
    package subscript(int key: Int) -> CBOR? {
        mapValue?.first { $0.key.intValue == key }?.value
    }

    /// The value under text key `key` of a map.
    package subscript(text key: String) -> CBOR? {
        mapValue?.first { $0.key.textValue == key }?.value
    }

    /// The canonical encoding (RFC 8949 §4.2.1 core deterministic: shortest heads, definite lengths; map entries in
    /// the order given). Tests use it to build what an authenticator sends.
    package var encoded: [UInt8] {
        var out: [UInt8] = []
        encode(into: &out)
        return out
    }

    private func encode(into out: inout [UInt8]) {
        func head(_ major: UInt8, _ value: UInt64) {
            let type = major << 5
            switch value {
            case 0..<24: out.append(type | UInt8(value))
            case 24...0xFF: out += [type | 24, UInt8(value)]
            case 0x100...0xFFFF: out += [type | 25, UInt8(value >> 8), UInt8(value & 0xFF)]
            case 0x1_0000...0xFFFF_FFFF:
                out += [type | 26] + (0..<4).reversed().map { UInt8((value >> ($0 * 8)) & 0xFF) }
            default: out += [type | 27] + (0..<8).reversed().map { UInt8((value >> ($0 * 8)) & 0xFF) }
            }
        }
        switch self {
        case .unsigned(let n): head(0, n)
        case .negative(let n): head(1, n)
        case .bytes(let bytes):
            head(2, UInt64(bytes.count))
            out += bytes
        case .text(let text):
            head(3, UInt64(text.utf8.count))
            out += Array(text.utf8)
        case .array(let items):
            head(4, UInt64(items.count))
            for item in items { item.encode(into: &out) }
        case .map(let entries):
            head(5, UInt64(entries.count))
            for entry in entries {
                entry.key.encode(into: &out)
                entry.value.encode(into: &out)
            }
        case .bool(let value): out.append(value ? 0xF5 : 0xF4)
        case .null: out.append(0xF6)
        case .undefined: out.append(0xF7)
        }
    }

    /// An integer item: unsigned for 0 and up, negative below.
    package static func int(_ value: Int) -> CBOR {
        value >= 0 ? .unsigned(UInt64(value)) : .negative(UInt64(-(value + 1)))
    }
}

/// Why CBOR could not be read.
package struct CBORError: Error, Sendable, Equatable, CustomStringConvertible {
    package let description: String
    init(_ description: String) { self.description = description }
}

/// Reads CBOR items from bytes, one after another (WebAuthn's authenticator data holds a COSE key followed by
/// more data, so a reader says where an item ended).
package struct CBORReader {
    /// Deeper nesting is refused: a COSE key or an attestation statement is two or three levels deep.
    package static let maxDepth = 16
    /// Larger maps are refused: an attestation object has three entries, a COSE key five, extension outputs a
    /// few; 64 leaves room for any authenticator and none for a flood.
    package static let maxMapEntries = 64

    private let bytes: [UInt8]
    /// The index of the next unread byte.
    package private(set) var offset: Int

    package init(_ bytes: [UInt8], offset: Int = 0) {
        self.bytes = bytes
        self.offset = offset
    }

    /// Whether every byte has been read.
    package var atEnd: Bool { offset >= bytes.count }

    /// Reads one whole item from bytes that must hold exactly one.
    package static func decode(_ bytes: [UInt8]) throws(CBORError) -> CBOR {
        var reader = CBORReader(bytes)
        let item = try reader.read()
        guard reader.atEnd else { throw CBORError("\(bytes.count - reader.offset) bytes after the CBOR item") }
        return item
    }

    /// Reads the next item.
    package mutating func read() throws(CBORError) -> CBOR { try read(depth: 0) }

    private mutating func byte() throws(CBORError) -> UInt8 {
        guard offset < bytes.count else { throw CBORError("CBOR ends early") }
        defer { offset += 1 }
        return bytes[offset]
    }

    private mutating func take(_ count: UInt64) throws(CBORError) -> ArraySlice<UInt8> {
        guard count <= UInt64(bytes.count - offset) else { throw CBORError("CBOR ends early (a length of \(count))") }
        let start = offset
        offset += Int(count)
        return bytes[start..<offset]
    }

    /// The argument of a head whose low five bits are `info`.
    private mutating func argument(_ info: UInt8) throws(CBORError) -> UInt64 {
        switch info {
        case 0..<24: return UInt64(info)
        case 24...27:
            let length = 1 << (info - 24)
            var value: UInt64 = 0
            for byte in try take(UInt64(length)) { value = value << 8 | UInt64(byte) }
            // A longer head than needed is well-formed (RFC 8949 §3) and some authenticators write one; what
            // is signed is the bytes, so nothing depends on the form.
            return value
        case 31: throw CBORError("indefinite-length CBOR is not accepted")
        default: throw CBORError("reserved CBOR additional information \(info)")
        }
    }

    private mutating func read(depth: Int) throws(CBORError) -> CBOR {
        guard depth <= Self.maxDepth else { throw CBORError("CBOR nested deeper than \(Self.maxDepth)") }
        let initial = try byte()
        let major = initial >> 5
        let info = initial & 0x1F
        switch major {
        case 0: return .unsigned(try argument(info))
        case 1: return .negative(try argument(info))
        case 2: return .bytes(Array(try take(try argument(info))))
        case 3:
            let raw = try take(try argument(info))
            guard let text = String(validating: raw, as: UTF8.self) else { throw CBORError("CBOR text is not UTF-8") }
            return .text(text)
        case 4:
            let count = try argument(info)
            // Each item takes at least one byte: a count beyond what is left is a lie, not an allocation.
            guard count <= UInt64(bytes.count - offset) else { throw CBORError("CBOR array longer than its bytes") }
            var items: [CBOR] = []
            items.reserveCapacity(Int(count))
            for _ in 0..<count { items.append(try read(depth: depth + 1)) }
            return .array(items)
        case 5:
            let count = try argument(info)
            guard count <= UInt64(bytes.count - offset) / 2 else { throw CBORError("CBOR map longer than its bytes") }
            // RT3-9: a map of thousands of keys, each compared with every other, cost most of a second before
            // any signature was checked. WebAuthn's maps hold a handful of entries; and duplicates are found
            // by the keys' canonical encodings in a set, in linear time (a key is an integer or a text string,
            // whose canonical encodings are equal exactly when they are). Not by the bytes read: a head may be
            // longer than needed (see argument(_:)), and -1 written as 0x20 and as 0x38 0x00 is one key twice —
            // which a reader taking the first and one taking the last would read differently.
            guard count <= UInt64(Self.maxMapEntries) else {
                throw CBORError("a CBOR map of \(count) entries (at most \(Self.maxMapEntries))")
            }
            var entries: [CBOR.Entry] = []
            entries.reserveCapacity(Int(count))
            var seen: Set<ArraySlice<UInt8>> = []
            for _ in 0..<count {
                let key = try read(depth: depth + 1)
                switch key {
                case .unsigned, .negative, .text: break
                default: throw CBORError("CBOR map key is not an integer or text")
                }
                guard seen.insert(ArraySlice(key.encoded)).inserted else { throw CBORError("duplicate CBOR map key") }
                entries.append(CBOR.Entry(key, try read(depth: depth + 1)))
            }
            return .map(entries)
        case 6: throw CBORError("CBOR tags are not accepted")
        default:
            switch info {
            case 20: return .bool(false)
            case 21: return .bool(true)
            case 22: return .null
            case 23: return .undefined
            case 25, 26, 27: throw CBORError("CBOR floats are not accepted")
            default: throw CBORError("unsupported CBOR simple value \(info)")
            }
        }
    }
}
