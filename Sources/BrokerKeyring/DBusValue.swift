/// One value of the D-Bus type system (D-Bus specification, "Type system"), as far as the Secret Service
/// uses it — every basic type but Unix file descriptors' passing, variants, arrays, dictionaries, structs.
package indirect enum DBusValue: Sendable, Equatable {
    case byte(UInt8)
    case boolean(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    /// A value that carries its own signature.
    case variant(DBusValue)
    /// Elements of one complete type, `element` (an array of dictionary entries is a dictionary: `{sv}`).
    case array(element: String, [DBusValue])
    case structure([DBusValue])
    case dictEntry(DBusValue, DBusValue)
    /// An index into the message's passed file descriptors (never sent by us; read and kept as a number).
    case unixFD(UInt32)

    /// The value's signature (one complete type).
    package var signature: String {
        switch self {
        case .byte: "y"
        case .boolean: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .variant: "v"
        case .array(let element, _): "a" + element
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        case .dictEntry(let key, let value): "{" + key.signature + value.signature + "}"
        case .unixFD: "h"
        }
    }

    // MARK: Building

    /// `a{ss}`: string attributes, as the Secret Service matches items.
    package static func stringDictionary(_ pairs: [(String, String)]) -> DBusValue {
        .array(element: "{ss}", pairs.map { .dictEntry(.string($0.0), .string($0.1)) })
    }

    /// `ay`.
    package static func bytes(_ bytes: [UInt8]) -> DBusValue { .array(element: "y", bytes.map(DBusValue.byte)) }

    /// `ao`.
    package static func objectPaths(_ paths: [String]) -> DBusValue {
        .array(element: "o", paths.map(DBusValue.objectPath))
    }

    // MARK: Reading

    package var stringValue: String? {
        switch self {
        case .string(let text), .objectPath(let text), .signature(let text): text
        default: nil
        }
    }

    package var boolValue: Bool? {
        if case .boolean(let value) = self { return value }
        return nil
    }

    /// The value inside a variant (or the value itself).
    package var unwrapped: DBusValue {
        if case .variant(let inner) = self { return inner.unwrapped }
        return self
    }

    package var arrayValue: [DBusValue]? {
        if case .array(_, let elements) = self { return elements }
        return nil
    }

    package var structureValue: [DBusValue]? {
        if case .structure(let fields) = self { return fields }
        return nil
    }

    /// The bytes of an `ay`.
    package var byteArray: [UInt8]? {
        guard case .array("y", let elements) = self else { return nil }
        var result: [UInt8] = []
        result.reserveCapacity(elements.count)
        for element in elements {
            guard case .byte(let byte) = element else { return nil }
            result.append(byte)
        }
        return result
    }

    /// The object paths of an `ao`.
    package var objectPathArray: [String]? {
        guard case .array("o", let elements) = self else { return nil }
        return elements.compactMap { if case .objectPath(let path) = $0 { path } else { nil } }
    }
}

/// Signatures: a string of complete types, each checked (D-Bus specification, "Valid Signatures").
package enum DBusSignature {
    /// At most 255 bytes; containers nest at most 32 arrays and 32 structs deep.
    static let maxLength = 255
    static let maxDepth = 32

    /// The complete types `signature` is made of; throws when it is not a valid signature.
    package static func split(_ signature: String) throws(DBusError) -> [String] {
        let bytes = Array(signature.utf8)
        guard bytes.count <= maxLength else { throw .malformed("a signature longer than 255 bytes") }
        var types: [String] = []
        var index = 0
        while index < bytes.count {
            let end = try completeTypeEnd(bytes, index, arrays: 0, structs: 0)
            types.append(String(decoding: bytes[index..<end], as: UTF8.self))
            index = end
        }
        return types
    }

    /// The index just past the complete type that starts at `start`.
    static func completeTypeEnd(_ sig: [UInt8], _ start: Int, arrays: Int, structs: Int) throws(DBusError) -> Int {
        guard start < sig.count else { throw .malformed("a signature ends inside a type") }
        switch sig[start] {
        case UInt8(ascii: "y"), UInt8(ascii: "b"), UInt8(ascii: "n"), UInt8(ascii: "q"), UInt8(ascii: "i"),
            UInt8(ascii: "u"), UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"), UInt8(ascii: "s"),
            UInt8(ascii: "o"), UInt8(ascii: "g"), UInt8(ascii: "v"), UInt8(ascii: "h"):
            return start + 1
        case UInt8(ascii: "a"):
            guard arrays < maxDepth else { throw .malformed("arrays nested more than 32 deep") }
            if start + 1 < sig.count, sig[start + 1] == UInt8(ascii: "{") {
                // A dictionary entry: a basic key, one complete value, and the closing brace.
                guard start + 2 < sig.count, isBasic(sig[start + 2]) else {
                    throw .malformed("a dictionary key that is not a basic type")
                }
                guard structs < maxDepth else { throw .malformed("structs nested more than 32 deep") }
                let valueEnd = try completeTypeEnd(sig, start + 3, arrays: arrays + 1, structs: structs + 1)
                guard valueEnd < sig.count, sig[valueEnd] == UInt8(ascii: "}") else {
                    throw .malformed("a dictionary entry without its closing brace")
                }
                return valueEnd + 1
            }
            return try completeTypeEnd(sig, start + 1, arrays: arrays + 1, structs: structs)
        case UInt8(ascii: "("):
            guard structs < maxDepth else { throw .malformed("structs nested more than 32 deep") }
            var index = start + 1
            guard index < sig.count, sig[index] != UInt8(ascii: ")") else { throw .malformed("an empty struct") }
            while index < sig.count, sig[index] != UInt8(ascii: ")") {
                index = try completeTypeEnd(sig, index, arrays: arrays, structs: structs + 1)
            }
            guard index < sig.count else { throw .malformed("a struct without its closing parenthesis") }
            return index + 1
        default:
            throw .malformed("the type code \(String(decoding: [sig[start]], as: UTF8.self)) in a signature")
        }
    }

    static func isBasic(_ code: UInt8) -> Bool {
        Array("ybnqiuxtdsogh".utf8).contains(code)
    }

    /// The alignment of values of the type whose code is `code`.
    static func alignment(_ code: UInt8) -> Int {
        switch code {
        case UInt8(ascii: "y"), UInt8(ascii: "g"), UInt8(ascii: "v"): 1
        case UInt8(ascii: "n"), UInt8(ascii: "q"): 2
        case UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"), UInt8(ascii: "("), UInt8(ascii: "{"): 8
        default: 4
        }
    }
}

/// What went wrong talking D-Bus.
package enum DBusError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Bytes that are not a valid D-Bus message (or a value that cannot be sent).
    case malformed(String)
    /// No session bus: `DBUS_SESSION_BUS_ADDRESS` unset and no `$XDG_RUNTIME_DIR/bus`.
    case noSessionBus
    /// The bus could not be reached or authenticated to.
    case unreachable(String)
    /// The deadline passed (`what` was under way).
    case timedOut(String)
    /// The bus or the service answered with an error.
    case remote(name: String, message: String)
    /// The connection closed.
    case closed

    package var description: String {
        switch self {
        case .malformed(let reason): "a malformed D-Bus message (\(reason))"
        case .noSessionBus: "no D-Bus session bus: DBUS_SESSION_BUS_ADDRESS is not set"
        case .unreachable(let reason): "the D-Bus session bus cannot be reached (\(reason))"
        case .timedOut(let what): "no answer in time from D-Bus (\(what))"
        case .remote(let name, let message): message.isEmpty ? name : "\(name): \(message)"
        case .closed: "the D-Bus session bus closed the connection"
        }
    }
}
