import BrokerCore
import Testing

/// The byte classes of BrokerCore's `ASCII.swift`, which the wire's parsers share (form escapes, JSON, PKCE,
/// client and provider names, request ids, header tokens): every byte against the spelled-out sets.
@Suite("ASCII byte classes")
struct ASCIITests {
    static let digits = Array("0123456789".utf8)
    static let lowercase = Array("abcdefghijklmnopqrstuvwxyz".utf8)
    static let uppercase = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)

    @Test("every byte is in exactly the classes its character is, and nothing above 0x7F is")
    func everyByteIsClassified() {
        for value in 0...255 {
            let byte = UInt8(value)
            let digit = Self.digits.contains(byte)
            let lower = Self.lowercase.contains(byte)
            let upper = Self.uppercase.contains(byte)
            #expect(byte.isASCIIDigit == digit, "\(byte)")
            #expect(byte.isASCIILowercase == lower, "\(byte)")
            #expect(byte.isASCIIUppercase == upper, "\(byte)")
            #expect(byte.isASCIIAlphanumeric == (digit || lower || upper), "\(byte)")
            #expect(byte.isURIUnreserved == (digit || lower || upper || Array("-._~".utf8).contains(byte)), "\(byte)")
            // Only a space and a horizontal tab: not CR, LF, VT, FF or NBSP (0xA0).
            #expect(byte.isHTTPWhitespace == (value == 0x20 || value == 0x09), "\(byte)")
            // Case maps letters onto letters and leaves every other byte alone.
            let lowered = lower || upper ? Self.lowercase[Int(byte | 0x20) - 0x61] : byte
            #expect(byte.asciiLowercased == lowered, "\(byte)")
            let raised = lower || upper ? Self.uppercase[Int(byte | 0x20) - 0x61] : byte
            #expect(byte.asciiUppercased == raised, "\(byte)")
        }
    }

    @Test("hex digits have their values in both cases; no other byte has one")
    func hexValues() {
        let hex = Array("0123456789abcdef".utf8)
        for value in 0...255 {
            let byte = UInt8(value)
            let expected =
                hex.firstIndex(of: byte)
                ?? hex.firstIndex(of: byte.asciiLowercased).flatMap {
                    Self.uppercase.contains(byte) ? $0 : nil
                }
            #expect(byte.asciiHexValue == expected.map(UInt8.init), "\(byte)")
        }
        #expect(UInt8(ascii: "F").asciiHexValue == 15 && UInt8(ascii: "G").asciiHexValue == nil)
        #expect(UInt8(ascii: "f").asciiHexValue == 15 && UInt8(ascii: "g").asciiHexValue == nil)
        #expect(UInt8(ascii: "@").asciiHexValue == nil && UInt8(ascii: "`").asciiHexValue == nil)
    }

    @Test func digitStrings() {
        #expect("0123456789".isASCIIDigits && "7".isASCIIDigits)
        #expect(!"".isASCIIDigits && !"12a".isASCIIDigits && !"٣".isASCIIDigits && !"1\u{0301}".isASCIIDigits)
    }
}

/// A user id is `provider:subject`, the provider an ASCII id: read at its first `:` byte, so every id reads back
/// from its own description, a subject that starts with a combining mark among them.
@Suite("User ids")
struct UserIDTests {
    @Test func userIDsReadBackFromTheirDescriptions() throws {
        for (provider, subject) in [
            ("google", "1045"), ("custom", "a:b:c"), ("microsoft", "\u{0301}x"), ("x_y-2", "é"), ("passkey", ":"),
        ] {
            let id = UserID(provider: ProviderID(rawValue: provider)!, subject: subject)
            let read = try #require(UserID(id.description), "\(provider):\(subject)")
            #expect(read.provider.rawValue == provider && read.subject == subject)
        }
        for refused in ["", ":x", "google:", "google", "Google:1", "go ogle:1", "\u{0301}:x", "é:x"] {
            #expect(UserID(refused) == nil, "\(refused)")
        }
    }
}
