import BrokerCore
import BrokerTesting
import Foundation
import Testing

@Suite("Strict JSON parser")
struct JSONParserTests {
    @Test func parsesDocuments() throws {
        let value = try #require(
            JSONValue.parse(
                Array(#" { "a": [1, -2.5e3, true, false, null], "b": "x\"\u00e9\ud83d\ude00\n", "c": {} } "#.utf8)))
        #expect(value["a"] == .array([.int(1), .double(-2500), .bool(true), .bool(false), .null]))
        #expect(value["b"] == .string("x\"é😀\n"))
        #expect(value["c"] == .object([:]))
        #expect(JSONValue.parse(Array("1700000000".utf8)) == .int(1_700_000_000))
        #expect(JSONValue.parse(Array("1.7e9".utf8))?.intValue == 1_700_000_000)
    }

    @Test(
        "rejects malformed and ambiguous documents",
        arguments: [
            "", "{", "{\"a\":1,}", "[1,]", "{\"a\" 1}", "01", "1.", ".5", "+1", "-", "1e", "tru", "nul", "\"abc",
            "\"a\u{01}b\"", "\"\\x\"", "\"\\ud800\"", "\"\\udc00\"", "{\"a\":1,\"a\":2}", "[1] [2]", "NaN", "1e999",
            String(repeating: "[", count: 100) + String(repeating: "]", count: 100),
        ])
    func rejects(_ text: String) {
        #expect(JSONValue.parse(Array(text.utf8)) == nil, "\(text.prefix(40))")
    }

    /// A string's end, its escapes and a raw control byte (which JSON refuses) are found wherever they sit in the
    /// string, eight bytes at a time or in the tail: at every offset of a 20-byte string.
    @Test func stringsAreReadWhereverTheirEscapesSit() {
        for offset in 0..<20 {
            let before = String(repeating: "a", count: offset)
            let after = String(repeating: "b", count: 19 - offset)
            for control in 0..<0x20 {
                let bytes = Array("\"\(before)".utf8) + [UInt8(control)] + Array("\(after)\"".utf8)
                #expect(JSONValue.parse(bytes) == nil, "\(control) at \(offset)")
            }
            #expect(JSONValue.parse(Array("\"\(before)\\n\(after)\"".utf8)) == .string(before + "\n" + after))
            #expect(JSONValue.parse(Array("\"\(before)\\\"\(after)\"".utf8)) == .string(before + "\"" + after))
            #expect(
                JSONValue.parse(Array("[\"\(before)\",\"\(after)\"]".utf8))
                    == .array([.string(before), .string(after)]))
            #expect(JSONValue.parse(Array("\"\(before)\(after)".utf8)) == nil, "unterminated")
            #expect(JSONValue.parse(Array("\"\(before)\\".utf8)) == nil, "an escape at the very end")
        }
    }

    @Test func rejectsInvalidUTF8() {
        #expect(JSONValue.parse([0x22, 0xff, 0x22]) == nil)
    }

    @Test func serializationRoundTrips() throws {
        let value: JSONValue = .object([
            "b": .array([.int(1), .double(0.5), .string("q\"\\/\n\u{01}")]), "a": .null, "c": .bool(true),
        ])
        let text = value.serialized()
        #expect(text == #"{"a":null,"b":[1,0.5,"q\"\\/\n\u0001"],"c":true}"#)
        #expect(JSONValue.parse(Array(text.utf8)) == value)
        // Foundation agrees on what we wrote.
        #expect(throws: Never.self) { try JSONSerialization.jsonObject(with: Data(text.utf8)) }
    }

    @Test func serializationEscapesOnlyWhatJSONRequires() throws {
        let value: JSONValue = .string("\t\r\u{08}\u{0C}\u{1F}\u{7F} é 🔑 \u{2028}")
        let text = value.serialized()
        #expect(text == "\"\\t\\r\\b\\f\\u001f\u{7F} é 🔑 \u{2028}\"")
        #expect(value.serializedBytes == Array(text.utf8))
        #expect(JSONValue.parse(value.serializedBytes) == value)
    }

    /// Strings are scanned eight bytes at a time for what needs an escape: every ASCII byte, and UTF-8 lead and
    /// continuation bytes beside them, at every offset of a 20-byte string (inside a word, across two words, in
    /// the tail read byte by byte) come out as a byte-at-a-time writer writes them, and read back as written.
    @Test func everyByteIsEscapedWherever() throws {
        func reference(_ text: String) -> [UInt8] {
            var out: [UInt8] = [UInt8(ascii: "\"")]
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "\""): out += Array(#"\""#.utf8)
                case UInt8(ascii: "\\"): out += Array(#"\\"#.utf8)
                case 0x0A: out += Array(#"\n"#.utf8)
                case 0x0D: out += Array(#"\r"#.utf8)
                case 0x09: out += Array(#"\t"#.utf8)
                case 0x08: out += Array(#"\b"#.utf8)
                case 0x0C: out += Array(#"\f"#.utf8)
                case ..<0x20: out += Array(String(format: "\\u%04x", Int(byte)).utf8)
                default: out.append(byte)
                }
            }
            return out + [UInt8(ascii: "\"")]
        }
        let specials = (0..<128).map { String(UnicodeScalar(UInt8($0))) } + ["é", "€", "🔑", "\u{7FF}", "\u{FFFF}"]
        var checked = 0
        for special in specials {
            for offset in 0..<20 {
                let text = String(repeating: "a", count: offset) + special + String(repeating: "b", count: 19 - offset)
                let value = JSONValue.string(text)
                #expect(value.serializedBytes == reference(text), "\(Array(special.utf8)) at \(offset)")
                #expect(JSONValue.parse(value.serializedBytes) == value)
                checked += 1
            }
        }
        // Two escapes in one word, and strings of nothing but escapes, of every length up to three words.
        for count in 0..<25 {
            for text in [String(repeating: "\"", count: count), String(repeating: "\u{01}\\", count: count)] {
                #expect(JSONValue.string(text).serializedBytes == reference(text), "\(count)")
            }
        }
        #expect(checked == specials.count * 20)
    }

    /// Escapes at the start, the end and side by side, between runs copied whole: every ASCII byte, and
    /// Foundation reads back what was written.
    @Test("integers are written as Swift spells them, both ends of Int64 among them")
    func integersAreWrittenInDecimal() {
        let values: [Int64] = [
            0, 1, -1, 9, 10, -10, 99, 100, 1_700_000_000, -1_700_000_000, .max, .min, .max - 1, .min + 1,
        ]
        for value in values {
            #expect(JSONValue.int(value).serialized() == String(value))
            #expect(JSONValue.parse(JSONValue.int(value).serializedBytes) == .int(value))
        }
        #expect(JSONValue.array([.int(-5), .int(42)]).serialized() == "[-5,42]")
    }

    @Test func serializationEscapesAtEveryPosition() throws {
        let ascii = String(decoding: (0..<128).map { UInt8($0) }, as: UTF8.self)
        for text in ["\"", "\"\\\n", "a\"", "\"a", "ab\u{01}\u{1F}cd", ascii, "é" + ascii + "🔑", ""] {
            let value = JSONValue.string(text)
            let bytes = value.serializedBytes
            #expect(JSONValue.parse(bytes) == value, "\(Array(text.utf8))")
            let read = try JSONSerialization.jsonObject(with: Data(bytes), options: .fragmentsAllowed) as? String
            #expect(read == text)
        }
        #expect(JSONValue.string("\"x\\").serialized() == #""\"x\\""#)
    }
}

@Suite("JSON serialization: member order")
struct JSONMemberOrderTests {
    /// The reference: Swift's own UTF-16 view, compared code unit by code unit.
    static func reference(_ a: String, _ b: String) -> Bool { a.utf16.lexicographicallyPrecedes(b.utf16) }

    @Test("UTF-16 code unit order, read from UTF-8: the same answer as the UTF-16 views on every pair")
    func utf16OrderFromUTF8() {
        // ASCII, Latin-1, CJK, the last BMP characters (U+E000–U+FFFF, where UTF-8 and UTF-16 orders differ from
        // each other), characters above U+FFFF, prefixes of each other, and the empty string.
        let alphabet: [String] = [
            "", "a", "b", "A", "é", "ÿ", "中", "\u{E000}", "\u{FFFD}", "\u{FFFF}", "😀", "\u{10000}", "\u{10FFFF}", "ab",
            "a😀", "a\u{FFFD}",
        ]
        var words = alphabet
        for first in alphabet { for second in alphabet { words.append(first + second) } }
        var differsFromUTF8Order = 0
        for a in words {
            for b in words {
                #expect(
                    JSONValue.utf16Precedes(a, b) == Self.reference(a, b),
                    "\(a.unicodeScalars.map(\.value)) vs \(b.unicodeScalars.map(\.value))")
                if Self.reference(a, b) != a.utf8.lexicographicallyPrecedes(b.utf8) { differsFromUTF8Order += 1 }
            }
        }
        // The pairs where plain UTF-8 order would be wrong are among them.
        #expect(differsFromUTF8Order > 100)
    }

    /// Keys around the rank's eight bytes: shared prefixes of seven, eight and nine bytes, a NUL where the shorter
    /// key's padding is, characters of two, three and four bytes cut by the eighth byte, the last BMP characters.
    static let rankedKeys: [String] = {
        let stems = [
            "", "a", "abcdefg", "abcdefgh", "abcdefghi", "abcdefg\u{0}", "abc\u{0}", "abcdef", "abcdefgé", "abcdefg中",
        ]
        let tails = [
            "", "\u{0}", "a", "z", "é", "\u{7FF}", "\u{E000}", "\u{FFFF}", "😀", "\u{10FFFF}", "ab", "\u{FFFD}x",
        ]
        var keys = Set<String>()
        for stem in stems { for tail in tails { keys.insert(stem + tail) } }
        return keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }()

    @Test("Where two keys' ranks differ, their order is the UTF-16 order")
    func ranksOrderAsUTF16() {
        var decided = 0
        for a in Self.rankedKeys {
            for b in Self.rankedKeys {
                let (x, y) = (JSONValue.sortRank(a), JSONValue.sortRank(b))
                guard x != y else { continue }
                decided += 1
                #expect((x < y) == Self.reference(a, b), "\(Array(a.utf8)) vs \(Array(b.utf8))")
            }
        }
        // Most pairs are decided by their ranks alone; the rest (a shared eight-byte prefix) by the keys.
        #expect(decided > Self.rankedKeys.count * Self.rankedKeys.count / 2)
    }

    @Test("An object of many keys, shared prefixes and NULs among them, is written in UTF-16 order")
    func manyMembersAreWrittenInUTF16Order() throws {
        let keys = Self.rankedKeys
        var members: [String: JSONValue] = [:]
        for (index, key) in keys.enumerated() { members[key] = .int(Int64(index)) }
        let written = JSONValue.object(members).serialized()
        // The reference: the keys sorted by their UTF-16 views, each with its value.
        let expected = keys.sorted(by: Self.reference)
        var reference = "{"
        for (position, key) in expected.enumerated() {
            if position > 0 { reference += "," }
            reference += JSONValue.string(key).serialized() + ":" + String(keys.firstIndex(of: key)!)
        }
        reference += "}"
        #expect(written == reference)
        // Foundation reads every member back.
        let read = try JSONSerialization.jsonObject(with: Data(written.utf8)) as? [String: Int]
        #expect(read?.count == keys.count)
    }

    @Test func membersAreWrittenInUTF16Order() {
        let document = JSONValue.object(["\u{FFFD}": 1, "😀": 2, "b": 3, "a": .object(["z": 1, "y": 2]), "": 0])
        #expect(document.serialized() == "{\"\":0,\"a\":{\"y\":2,\"z\":1},\"b\":3,\"😀\":2,\"\u{FFFD}\":1}")
    }
}
