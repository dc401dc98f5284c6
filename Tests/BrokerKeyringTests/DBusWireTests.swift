import BrokerKeyring
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// The D-Bus message format against jeepney (a D-Bus implementation we did not write): what we write it
/// reads, what it writes (big-endian, a Secret Service body) we read; and malformed bytes are refused with a
/// reason, never a trap.
@Suite("D-Bus wire format")
struct DBusWireTests {
    static func jeepney(_ arguments: [String]) async throws -> String {
        let result = try await ProcessRunner.run(
            "python3", [TestPaths.interop("dbus_wire.py")] + arguments)
        #expect(result.status == 0, "\(result.stderr)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static let createItem: [DBusValue] = [
        .array(
            element: "{sv}",
            [
                .dictEntry(
                    .string("org.freedesktop.Secret.Item.Label"), .variant(.string("broker refresh token"))),
                .dictEntry(
                    .string("org.freedesktop.Secret.Item.Attributes"),
                    .variant(.stringDictionary([("service", "broker"), ("profile", "default")]))),
            ]),
        .structure([
            .objectPath("/org/freedesktop/secrets/session/s1"), .bytes([]), .bytes(Array("s3cr\u{0}t".utf8)),
            .string("text/plain"),
        ]),
        .boolean(true),
    ]

    @Test func jeepneyReadsWhatWeWrite() async throws {
        var message = DBusMessage.call(
            destination: "org.freedesktop.secrets", path: "/org/freedesktop/secrets/collection/login",
            interface: "org.freedesktop.Secret.Collection", member: "CreateItem", Self.createItem)
        message.serial = 7
        let bytes = try message.encode()
        let parsed = try #require(
            try JSONSerialization.jsonObject(
                with: Data(try await Self.jeepney(["parse", bytes.map { String(format: "%02x", $0) }.joined()]).utf8))
                as? [String: Any])
        #expect(parsed["type"] as? Int == 1 && parsed["serial"] as? Int == 7)
        #expect(parsed["member"] as? String == "CreateItem")
        #expect(parsed["destination"] as? String == "org.freedesktop.secrets")
        #expect(parsed["signature"] as? String == "a{sv}(oayays)b")
        let body = try #require(parsed["body"] as? [Any])
        let secret = try #require((body[1] as? [Any])?[2] as? [Int])
        #expect(secret == Array("s3cr\u{0}t".utf8).map(Int.init), "bytes, NUL included")
        let properties = try #require(body[0] as? [String: Any])
        let attributes = try #require((properties["org.freedesktop.Secret.Item.Attributes"] as? [Any])?[1])
        #expect(attributes as? [String: String] == ["service": "broker", "profile": "default"])
        #expect(body[2] as? Bool == true)
        #expect(try DBusMessage.decode(bytes) == message, "and we read it back the same")
    }

    @Test func weReadWhatJeepneyWritesBigEndian() async throws {
        let hex = try await Self.jeepney(["make"])
        let bytes = try #require(
            stride(from: 0, to: hex.count, by: 2).map { offset -> UInt8? in
                let start = hex.index(hex.startIndex, offsetBy: offset)
                return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)
            } as [UInt8?]?
        ).compactMap { $0 }
        #expect(bytes.first == UInt8(ascii: "B"))
        let message = try DBusMessage.decode(bytes)
        #expect(message.kind == .methodCall && message.serial == 7 && message.member == "CreateItem")
        #expect(message.path == "/org/freedesktop/secrets/collection/login")
        #expect(message.signature == "a{sv}(oayays)b")
        #expect(message.body[1].structureValue?[2].byteArray == Array("s3cr\u{0}t".utf8))
        let properties = try #require(message.body[0].arrayValue)
        #expect(properties.count == 2)
        #expect(message.body[2] == .boolean(true))
    }

    @Test func valuesOfEveryTypeRoundTrip() throws {
        let values: [DBusValue] = [
            .byte(0xFF), .boolean(false), .int16(-2), .uint16(65535), .int32(-70000), .uint32(4_000_000_000),
            .int64(-1 << 40), .uint64(1 << 63), .double(2.5), .string("héllo"), .objectPath("/"),
            .signature("a{sv}"), .variant(.array(element: "s", [])),
            .array(element: "(ys)", [.structure([.byte(1), .string("x")])]),
            .unixFD(0),
        ]
        var message = DBusMessage(kind: .signal)
        message.serial = 1
        message.path = "/a/b_c"
        message.interface = "x.y"
        message.member = "Z"
        message.body = values
        #expect(try DBusMessage.decode(try message.encode()) == message)
    }

    @Test(arguments: [
        ("empty", [UInt8]()),
        ("unknown byte order", Array("X\u{1}\u{0}\u{1}".utf8) + Array(repeating: 0, count: 12)),
        ("version 2", [UInt8(ascii: "l"), 1, 0, 2] + Array(repeating: 0, count: 12)),
        ("a body longer than the limit", [UInt8(ascii: "l"), 2, 0, 1, 0, 0, 0x20, 0, 1, 0, 0, 0, 0, 0, 0, 0]),
    ])
    func malformedHeadersAreRefused(_ name: String, _ bytes: [UInt8]) {
        #expect(throws: DBusError.self, "\(name)") { _ = try DBusMessage.decode(bytes) }
    }

    /// Every single-byte change and every truncation of a valid message: an error or a message, never a trap.
    @Test func damagedMessagesAreRefusedOrReadNeverATrap() throws {
        var message = DBusMessage.call(
            destination: "org.freedesktop.secrets", path: "/org/freedesktop/secrets",
            interface: "org.freedesktop.Secret.Service", member: "SearchItems",
            [.stringDictionary([("service", "broker")])])
        message.serial = 3
        let bytes = try message.encode()
        var refused = 0
        for index in bytes.indices {
            for value: UInt8 in [0, 0xFF, 0x7F, bytes[index] &+ 1] where value != bytes[index] {
                var damaged = bytes
                damaged[index] = value
                if (try? DBusMessage.decode(damaged)) == nil { refused += 1 }
            }
            if index > 0 { #expect(throws: DBusError.self) { _ = try DBusMessage.decode(Array(bytes[..<index])) } }
        }
        #expect(refused > bytes.count, "most damage is noticed")
    }

    @Test func badSignaturesAndValuesAreRefused() {
        for bad in ["a", "(", "()", "a{vs}", "{ss}", "(s", "z", String(repeating: "a", count: 40) + "s"] {
            #expect(throws: DBusError.self, "\(bad)") { _ = try DBusSignature.split(bad) }
        }
        #expect(throws: DBusError.self) {
            var message = DBusMessage.call(
                destination: "d", path: "/ok", interface: "i", member: "m", [.objectPath("no/slash")])
            message.serial = 1
            _ = try message.encode()
        }
        #expect(throws: DBusError.self) {
            var message = DBusMessage.call(
                destination: "d", path: "/ok", interface: "i", member: "m", [.string("nul\u{0}")])
            message.serial = 1
            _ = try message.encode()
        }
    }
}
