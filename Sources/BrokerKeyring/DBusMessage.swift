/// One D-Bus message (D-Bus specification, "Message Protocol"): the fixed header, the header fields, the body.
/// Written little-endian; read in either byte order. ``decode(_:)`` is what `Fuzz/dbus` feeds.
package struct DBusMessage: Sendable, Equatable {
    package enum Kind: UInt8, Sendable {
        case methodCall = 1
        case methodReturn = 2
        case error = 3
        case signal = 4
    }

    package var kind: Kind
    package var flags: UInt8 = 0
    package var serial: UInt32 = 0
    package var path: String?
    package var interface: String?
    package var member: String?
    package var errorName: String?
    package var replySerial: UInt32?
    package var destination: String?
    package var sender: String?
    package var body: [DBusValue] = []

    /// The largest message this client reads: the Secret Service's answers are small (a secret is at most a
    /// few kilobytes); the protocol allows 128 MiB, which a broken or hostile bus would make us allocate.
    package static let maxLength = 1 << 20
    /// `NO_REPLY_EXPECTED`.
    package static let noReplyExpected: UInt8 = 0x1

    package init(kind: Kind) { self.kind = kind }

    package static func call(
        destination: String, path: String, interface: String, member: String, _ body: [DBusValue] = []
    ) -> DBusMessage {
        var message = DBusMessage(kind: .methodCall)
        message.destination = destination
        message.path = path
        message.interface = interface
        message.member = member
        message.body = body
        return message
    }

    package var signature: String { body.map(\.signature).joined() }

    // MARK: Writing

    package func encode() throws(DBusError) -> [UInt8] {
        guard serial != 0 else { throw .malformed("a message needs a serial") }
        var bodyWriter = DBusWriter()
        for value in body { try bodyWriter.write(value) }
        var fields: [DBusValue] = []
        func field(_ code: UInt8, _ value: DBusValue?) {
            if let value { fields.append(.structure([.byte(code), .variant(value)])) }
        }
        field(1, path.map(DBusValue.objectPath))
        field(2, interface.map(DBusValue.string))
        field(3, member.map(DBusValue.string))
        field(4, errorName.map(DBusValue.string))
        field(5, replySerial.map(DBusValue.uint32))
        field(6, destination.map(DBusValue.string))
        field(7, sender.map(DBusValue.string))
        if !body.isEmpty { field(8, .signature(signature)) }
        var writer = DBusWriter()
        writer.bytes = [UInt8(ascii: "l"), kind.rawValue, flags, 1]
        writer.uint32(UInt32(bodyWriter.bytes.count))
        writer.uint32(serial)
        try writer.write(.array(element: "(yv)", fields))
        writer.align(8)
        let total = writer.bytes.count + bodyWriter.bytes.count
        guard total <= Self.maxLength else { throw .malformed("a message of \(total) bytes") }
        return writer.bytes + bodyWriter.bytes
    }

    // MARK: Reading

    /// The whole length of the message whose first 16 bytes are `prefix` (to know how much more to read).
    package static func length(prefix: ArraySlice<UInt8>) throws(DBusError) -> Int {
        guard prefix.count >= 16 else { throw .malformed("a header shorter than 16 bytes") }
        let start = prefix.startIndex
        let big: Bool
        switch prefix[start] {
        case UInt8(ascii: "l"): big = false
        case UInt8(ascii: "B"): big = true
        default: throw .malformed("an unknown byte order")
        }
        guard prefix[start + 3] == 1 else { throw .malformed("protocol version \(prefix[start + 3])") }
        func word(_ at: Int) -> Int {
            let bytes = (0..<4).map { Int(prefix[start + at + $0]) }
            return big
                ? bytes[0] << 24 | bytes[1] << 16 | bytes[2] << 8 | bytes[3]
                : bytes[3] << 24 | bytes[2] << 16 | bytes[1] << 8 | bytes[0]
        }
        let bodyLength = word(4)
        let fieldsLength = word(12)
        guard bodyLength <= maxLength, fieldsLength <= maxLength else {
            throw .malformed("a message longer than \(maxLength) bytes")
        }
        let headerEnd = 16 + fieldsLength
        let total = (headerEnd + 7) / 8 * 8 + bodyLength
        guard total <= maxLength else { throw .malformed("a message longer than \(maxLength) bytes") }
        return total
    }

    /// A whole message; throws on anything malformed (never traps, never reads past `bytes`).
    package static func decode(_ bytes: [UInt8]) throws(DBusError) -> DBusMessage {
        let total = try length(prefix: bytes[...])
        guard bytes.count == total else { throw .malformed("\(bytes.count) bytes for a message of \(total)") }
        var reader = DBusReader(bytes: bytes, bigEndian: bytes[0] == UInt8(ascii: "B"))
        reader.offset = 1
        guard let kind = Kind(rawValue: bytes[1]) else { throw .malformed("message type \(bytes[1])") }
        var message = DBusMessage(kind: kind)
        message.flags = bytes[2]
        reader.offset = 4
        let bodyLength = Int(try reader.uint32())
        message.serial = try reader.uint32()
        guard message.serial != 0 else { throw .malformed("serial 0") }
        guard let fields = try reader.read("a(yv)").arrayValue else { throw .malformed("header fields") }
        var signature = ""
        for field in fields {
            guard case .structure(let parts) = field, parts.count == 2, case .byte(let code) = parts[0],
                case .variant(let value) = parts[1]
            else { throw .malformed("a header field") }
            func text(_ expected: String) throws(DBusError) -> String {
                guard value.signature == expected, let text = value.stringValue else {
                    throw .malformed("header field \(code) of type \(value.signature)")
                }
                return text
            }
            switch code {
            case 1: message.path = try text("o")
            case 2: message.interface = try text("s")
            case 3: message.member = try text("s")
            case 4: message.errorName = try text("s")
            case 5:
                guard case .uint32(let serial) = value else { throw .malformed("the reply serial's type") }
                message.replySerial = serial
            case 6: message.destination = try text("s")
            case 7: message.sender = try text("s")
            case 8: signature = try text("g")
            default: break  // Unknown fields are ignored (the specification says so).
            }
        }
        try reader.align(8)
        guard bytes.count - reader.offset == bodyLength else { throw .malformed("the body's length") }
        reader.bodyStart = reader.offset
        for type in try DBusSignature.split(signature) {
            message.body.append(try reader.read(type))
        }
        guard reader.offset == bytes.count else { throw .malformed("bytes after the body") }
        switch kind {
        case .methodCall:
            guard message.path != nil, message.member != nil else { throw .malformed("a call without path or member") }
        case .signal:
            guard message.path != nil, message.member != nil, message.interface != nil else {
                throw .malformed("a signal without path, interface or member")
            }
        case .methodReturn:
            guard message.replySerial != nil else { throw .malformed("a return without a reply serial") }
        case .error:
            guard message.replySerial != nil, message.errorName != nil else {
                throw .malformed("an error without a name or reply serial")
            }
        }
        return message
    }
}

/// Marshals values, little-endian, aligned from the start of what it writes (a body starts 8-aligned, so
/// alignment within the body is alignment within the message).
struct DBusWriter {
    var bytes: [UInt8] = []

    mutating func align(_ boundary: Int) {
        while bytes.count % boundary != 0 { bytes.append(0) }
    }

    mutating func uint32(_ value: UInt32) {
        align(4)
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func fixed<T: FixedWidthInteger>(_ value: T) {
        align(MemoryLayout<T>.size)
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func text(_ text: String) throws(DBusError) {
        let utf8 = Array(text.utf8)
        guard !utf8.contains(0) else { throw .malformed("a string with a NUL byte") }
        uint32(UInt32(utf8.count))
        bytes.append(contentsOf: utf8)
        bytes.append(0)
    }

    mutating func signature(_ text: String) throws(DBusError) {
        _ = try DBusSignature.split(text)
        bytes.append(UInt8(text.utf8.count))
        bytes.append(contentsOf: text.utf8)
        bytes.append(0)
    }

    mutating func write(_ value: DBusValue) throws(DBusError) {
        switch value {
        case .byte(let byte): bytes.append(byte)
        case .boolean(let flag): uint32(flag ? 1 : 0)
        case .int16(let number): fixed(number)
        case .uint16(let number): fixed(number)
        case .int32(let number): fixed(number)
        case .uint32(let number): uint32(number)
        case .int64(let number): fixed(number)
        case .uint64(let number): fixed(number)
        case .double(let number): fixed(number.bitPattern)
        case .unixFD(let index): uint32(index)
        case .string(let text): try self.text(text)
        case .objectPath(let path):
            guard DBusReader.isObjectPath(path) else { throw .malformed("the object path \"\(path)\"") }
            try self.text(path)
        case .signature(let text): try signature(text)
        case .variant(let inner):
            try signature(inner.signature)
            try write(inner)
        case .array(let element, let elements):
            if !element.hasPrefix("{") {
                guard try DBusSignature.split(element).count == 1 else {
                    throw .malformed("an array of \"\(element)\"")
                }
            }
            uint32(0)
            let lengthAt = bytes.count - 4
            align(DBusSignature.alignment(element.utf8.first ?? 0))
            let start = bytes.count
            for item in elements {
                guard item.signature == element else {
                    throw .malformed("an element \(item.signature) in an array of \(element)")
                }
                try write(item)
            }
            let length = UInt32(bytes.count - start).littleEndian
            withUnsafeBytes(of: length) { raw in
                for index in 0..<4 { bytes[lengthAt + index] = raw[index] }
            }
        case .structure(let fields):
            guard !fields.isEmpty else { throw .malformed("an empty struct") }
            align(8)
            for field in fields { try write(field) }
        case .dictEntry(let key, let value):
            align(8)
            try write(key)
            try write(value)
        }
    }
}

/// Unmarshals values from a whole message, checking every length, alignment and nesting limit.
struct DBusReader {
    let bytes: [UInt8]
    let bigEndian: Bool
    var offset = 0
    /// Where the body starts (padding is checked relative to the message start, which is the same).
    var bodyStart = 0
    var depth = 0

    init(bytes: [UInt8], bigEndian: Bool) {
        self.bytes = bytes
        self.bigEndian = bigEndian
    }

    mutating func align(_ boundary: Int) throws(DBusError) {
        let aligned = (offset + boundary - 1) / boundary * boundary
        guard aligned <= bytes.count else { throw .malformed("padding past the end") }
        for index in offset..<aligned where bytes[index] != 0 { throw .malformed("non-zero padding") }
        offset = aligned
    }

    mutating func take(_ count: Int) throws(DBusError) -> ArraySlice<UInt8> {
        guard count >= 0, count <= bytes.count - offset else { throw .malformed("a value past the end") }
        defer { offset += count }
        return bytes[offset..<offset + count]
    }

    mutating func integer(_ size: Int) throws(DBusError) -> UInt64 {
        try align(size)
        let raw = try take(size)
        var value: UInt64 = 0
        if bigEndian {
            for byte in raw { value = value << 8 | UInt64(byte) }
        } else {
            for byte in raw.reversed() { value = value << 8 | UInt64(byte) }
        }
        return value
    }

    mutating func uint32() throws(DBusError) -> UInt32 { UInt32(try integer(4)) }

    mutating func text() throws(DBusError) -> String {
        let length = Int(try uint32())
        let raw = try take(length)
        guard try take(1).first == 0 else { throw .malformed("a string without its NUL") }
        guard !raw.contains(0), let text = String(validating: raw, as: UTF8.self) else {
            throw .malformed("a string that is not UTF-8")
        }
        return text
    }

    mutating func signatureText() throws(DBusError) -> String {
        let length = Int(try take(1).first ?? 0)
        let raw = try take(length)
        guard try take(1).first == 0, let text = String(validating: raw, as: UTF8.self) else {
            throw .malformed("a signature without its NUL")
        }
        _ = try DBusSignature.split(text)
        return text
    }

    /// One value of the complete type `type`.
    mutating func read(_ type: String) throws(DBusError) -> DBusValue {
        let sig = Array(type.utf8)
        var index = 0
        let value = try read(sig, &index)
        guard index == sig.count else { throw .malformed("the signature \(type) is not one complete type") }
        return value
    }

    mutating func read(_ sig: [UInt8], _ index: inout Int) throws(DBusError) -> DBusValue {
        guard index < sig.count else { throw .malformed("a signature ends inside a type") }
        depth += 1
        defer { depth -= 1 }
        guard depth <= 64 else { throw .malformed("values nested more than 64 deep") }
        let code = sig[index]
        index += 1
        switch code {
        case UInt8(ascii: "y"): return .byte(try take(1).first ?? 0)
        case UInt8(ascii: "b"):
            let raw = try uint32()
            guard raw <= 1 else { throw .malformed("a boolean of \(raw)") }
            return .boolean(raw == 1)
        case UInt8(ascii: "n"): return .int16(Int16(truncatingIfNeeded: try integer(2)))
        case UInt8(ascii: "q"): return .uint16(UInt16(truncatingIfNeeded: try integer(2)))
        case UInt8(ascii: "i"): return .int32(Int32(truncatingIfNeeded: try integer(4)))
        case UInt8(ascii: "u"): return .uint32(try uint32())
        case UInt8(ascii: "h"): return .unixFD(try uint32())
        case UInt8(ascii: "x"): return .int64(Int64(bitPattern: try integer(8)))
        case UInt8(ascii: "t"): return .uint64(try integer(8))
        case UInt8(ascii: "d"): return .double(Double(bitPattern: try integer(8)))
        case UInt8(ascii: "s"): return .string(try text())
        case UInt8(ascii: "o"):
            let path = try text()
            guard Self.isObjectPath(path) else { throw .malformed("the object path \"\(path.prefix(64))\"") }
            return .objectPath(path)
        case UInt8(ascii: "g"): return .signature(try signatureText())
        case UInt8(ascii: "v"):
            let inner = try signatureText()
            let types = try DBusSignature.split(inner)
            guard types.count == 1 else { throw .malformed("a variant of \(types.count) types") }
            return .variant(try read(inner))
        case UInt8(ascii: "a"):
            let elementStart = index
            let elementEnd = try DBusSignature.completeTypeEnd(sig, index - 1, arrays: 0, structs: 0)
            let element = String(decoding: sig[elementStart..<elementEnd], as: UTF8.self)
            let length = Int(try uint32())
            guard length <= 1 << 26 else { throw .malformed("an array longer than 64 MiB") }
            try align(DBusSignature.alignment(sig[elementStart]))
            guard length <= bytes.count - offset else { throw .malformed("an array past the end") }
            let end = offset + length
            var elements: [DBusValue] = []
            while offset < end {
                var at = elementStart
                if sig[elementStart] == UInt8(ascii: "{") {
                    try align(8)
                    at += 1
                    let key = try read(sig, &at)
                    let value = try read(sig, &at)
                    elements.append(.dictEntry(key, value))
                } else {
                    elements.append(try read(sig, &at))
                }
            }
            guard offset == end else { throw .malformed("an array whose elements overrun its length") }
            index = elementEnd
            return .array(element: element, elements)
        case UInt8(ascii: "("):
            try align(8)
            var fields: [DBusValue] = []
            while index < sig.count, sig[index] != UInt8(ascii: ")") {
                fields.append(try read(sig, &index))
            }
            guard index < sig.count, !fields.isEmpty else { throw .malformed("a struct's signature") }
            index += 1
            return .structure(fields)
        default:
            throw .malformed("the type code \(code)")
        }
    }

    /// `/`, or `/`-separated non-empty elements of `[A-Za-z0-9_]`.
    static func isObjectPath(_ path: String) -> Bool {
        let bytes = Array(path.utf8)
        guard bytes.first == UInt8(ascii: "/") else { return false }
        if bytes.count == 1 { return true }
        guard bytes.last != UInt8(ascii: "/") else { return false }
        var previousSlash = false
        for byte in bytes.dropFirst() {
            if byte == UInt8(ascii: "/") {
                if previousSlash { return false }
                previousSlash = true
            } else {
                let ok =
                    (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                    || byte == 0x5F
                guard ok else { return false }
                previousSlash = false
            }
        }
        return true
    }
}
