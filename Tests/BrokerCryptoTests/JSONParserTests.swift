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

    /// Escapes at the start, the end and side by side, between runs copied whole: every ASCII byte, and
    /// Foundation reads back what was written.
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
