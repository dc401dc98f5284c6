import BrokerCore
import BrokerCrypto
import Testing

@Suite("ES256 signatures: DER ECDSA-Sig-Value <-> JWS r || s")
struct ECDSASignatureTests {
    static func integer(_ bytes: [UInt8]) -> [UInt8] { [0x02, UInt8(bytes.count)] + bytes }
    static func sequence(_ body: [UInt8]) -> [UInt8] { [0x30, UInt8(body.count)] + body }

    @Test("canonical encodings, written out byte by byte")
    func knownEncodings() throws {
        let cases: [(r: [UInt8], s: [UInt8], der: [UInt8])] = [
            // Both full width, high bits clear: 32-byte INTEGERs as they are.
            (
                [UInt8](repeating: 0x01, count: 32), [UInt8](repeating: 0x7f, count: 32),
                Self.sequence(
                    Self.integer([UInt8](repeating: 0x01, count: 32))
                        + Self.integer([UInt8](repeating: 0x7f, count: 32)))
            ),
            // A high bit needs a zero byte in front (else the INTEGER is negative); leading zeros are dropped.
            (
                [0x80] + [UInt8](repeating: 0, count: 31), [0, 0, 0x05] + [UInt8](repeating: 0xaa, count: 29),
                Self.sequence(
                    Self.integer([0x00, 0x80] + [UInt8](repeating: 0, count: 31))
                        + Self.integer([0x05] + [UInt8](repeating: 0xaa, count: 29)))
            ),
            // A leading zero byte followed by a high bit: the zero goes, a zero comes back for the sign.
            (
                [0x00, 0x90] + [UInt8](repeating: 0x11, count: 30), [UInt8](repeating: 0xff, count: 32),
                Self.sequence(
                    Self.integer([0x00, 0x90] + [UInt8](repeating: 0x11, count: 30))
                        + Self.integer([0x00] + [UInt8](repeating: 0xff, count: 32)))
            ),
            // Zero keeps one byte.
            (
                [UInt8](repeating: 0, count: 32), [UInt8](repeating: 0, count: 31) + [0x01],
                Self.sequence(Self.integer([0x00]) + Self.integer([0x01]))
            ),
        ]
        for (r, s, der) in cases {
            #expect(ECDSASignature.derFromRaw(r + s) == der)
            #expect(try ECDSASignature.rawFromDER(der) == r + s)
        }
        #expect(ECDSASignature.derFromRaw([UInt8](repeating: 1, count: 63)) == nil)
        #expect(ECDSASignature.derFromRaw([UInt8](repeating: 1, count: 65)) == nil)
    }

    @Test("anything but the canonical DER of two numbers of at most 32 bytes is refused")
    func malformedDER() throws {
        let one = Self.integer([0x01])
        let full = Self.integer([UInt8](repeating: 0x22, count: 32))
        let refused: [(String, [UInt8])] = [
            ("empty", []),
            ("not a SEQUENCE", [0x31, 6] + one + one),
            ("long-form length", [0x30, 0x81, 6] + one + one),
            ("length longer than the bytes", [0x30, 7] + one + one),
            ("length shorter than the bytes", [0x30, 5] + one + one),
            ("trailing byte", Self.sequence(one + one) + [0x00]),
            ("a third INTEGER", Self.sequence(one + one + one)),
            ("one INTEGER", Self.sequence(full)),
            ("not an INTEGER", Self.sequence([0x04, 1, 1] + one)),
            ("an empty INTEGER", Self.sequence([0x02, 0] + one + one)),
            ("a negative r", Self.sequence(Self.integer([0x80]) + one)),
            ("a negative s", Self.sequence(one + Self.integer([0xff, 0x01]))),
            ("a needless leading zero", Self.sequence(Self.integer([0x00, 0x01]) + one)),
            (
                "33 bytes without the sign's zero",
                Self.sequence(Self.integer([UInt8](repeating: 0x01, count: 33)) + one)
            ),
            (
                "34 bytes", Self.sequence(Self.integer([0x00, 0x00] + [UInt8](repeating: 0x81, count: 32)) + one)
            ),
            ("an INTEGER running past the end", [0x30, 6, 0x02, 9, 1, 1, 0x02, 1]),
        ]
        for (why, der) in refused {
            #expect(throws: CryptoError.self, "\(why)") { try ECDSASignature.rawFromDER(der) }
        }
    }

    /// OpenSSL's ECDSA verification re-encodes the DER it parses and refuses a signature whose encoding differs,
    /// so a verified signature proves the encoding canonical. About one signature in 128 has an r or s with a
    /// leading zero byte (the short INTEGER case) and one in two a high bit; signing goes on until both are seen.
    @Test("OpenSSL signs and verifies through these encodings, short and padded numbers included")
    func openSSLAgrees() throws {
        let key = try AsymmetricKey.generate(.ecP256)
        var sawShort = false
        var sawPadded = false
        var signed = 0
        while !(sawShort && sawPadded), signed < 20_000 {
            let message = Array("message \(signed)".utf8)
            let raw = try key.sign(message)
            signed += 1
            #expect(raw.count == 64)
            #expect(key.verify(signature: raw, message: message), "signature \(signed) does not verify")
            let der = try #require(ECDSASignature.derFromRaw(raw))
            #expect(try ECDSASignature.rawFromDER(der) == raw)
            if raw[0] == 0 || raw[32] == 0 {
                sawShort = true
                // The same signature with one bit of s changed is refused.
                var other = raw
                other[63] ^= 1
                #expect(!key.verify(signature: other, message: message))
            }
            if raw[0] & 0x80 != 0 || raw[32] & 0x80 != 0 { sawPadded = true }
        }
        #expect(sawShort && sawPadded, "no short or no padded number in \(signed) signatures")
    }
}
