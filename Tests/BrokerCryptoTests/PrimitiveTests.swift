import BrokerCore
import BrokerTesting
import Foundation
import Testing

@testable import BrokerCrypto

@Suite("Base64URL")
struct Base64URLTests {
    @Test(
        "RFC 4648 §10 vectors, URL alphabet, no padding",
        arguments: [
            ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ])
    func roundTrip(plain: String, encoded: String) throws {
        #expect(Base64URL.encode(plain) == encoded)
        #expect(Base64URL.decode(encoded) == Array(plain.utf8))
    }

    @Test func usesTheURLAlphabet() {
        #expect(Base64URL.encode([0xfb, 0xff]) == "-_8")
        #expect(Base64URL.decode("-_8") == [0xfb, 0xff])
        #expect(Base64URL.encodeStandard([0xfb, 0xff]) == "+/8=")
    }

    @Test(
        "rejects what no encoder produces",
        arguments: [
            "Zg==", "Zg=", "Zm9v ", " Zm9v", "Zm\n9v", "Zm9v+", "Zm9v/", "Z", "Zm9vY", "Zh", "Zm9", "Zm8\u{0}",
            "Zm9vYmFy=", "é",
        ])
    func rejects(_ text: String) {
        // "Zh" and "Zm9" carry non-zero trailing bits: a second spelling of "f" and "fo".
        #expect(Base64URL.decode(text) == nil)
    }

    /// Foundation's encoder, an implementation nobody here wrote, on every length from 0 to 200 (each remainder
    /// of 3 and 4 many times over), with bytes from a fixed-seed generator.
    @Test("agrees with Foundation's base64 on every length up to 200, both alphabets")
    func agreesWithFoundation() throws {
        var state: UInt64 = 0x2545_F491_4F6C_DD1D
        for length in 0...200 {
            let bytes = (0..<length).map { _ in
                state ^= state << 13
                state ^= state >> 7
                state ^= state << 17
                return UInt8(truncatingIfNeeded: state)
            }
            let standard = Data(bytes).base64EncodedString()
            let url = String(
                standard.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                    .prefix { $0 != "=" })
            #expect(Base64URL.encodeStandard(bytes) == standard)
            #expect(Base64URL.encode(bytes) == url)
            #expect(Base64URL.decode(url) == bytes)
            #expect(Base64URL.decodeStandard(standard) == bytes)
            // From a slice that does not start at 0, a Substring, and a collection with no contiguous storage.
            let framed = Array("..\(url)..".utf8)
            #expect(Base64URL.decode(framed[2..<(framed.count - 2)]) == bytes)
            #expect(Base64URL.decode(("." + url).dropFirst()) == bytes)
            #expect(Base64URL.decode(AnyCollection(Array(url.utf8))) == bytes)
            #expect(Base64URL.encode(AnyCollection(bytes)) == url)
            // A character outside the alphabet anywhere, the last one included, is refused.
            if !url.isEmpty {
                for position in [0, url.utf8.count / 2, url.utf8.count - 1] {
                    var broken = Array(url.utf8)
                    broken[position] = UInt8(ascii: "=")
                    #expect(Base64URL.decode(broken) == nil, "'=' at \(position) of \(url)")
                }
            }
        }
    }
}

@Suite("Digests, HMAC, constant-time compare, random")
struct DigestTests {
    @Test func sha2KnownAnswers() {
        #expect(
            Digest.hash(.sha256, Array("abc".utf8)).hexString
                == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(
            Digest.hash(.sha384, Array("abc".utf8)).hexString
                == "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7")
        #expect(
            Digest.hash(.sha512, Array("abc".utf8)).hexString
                == "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"
        )
    }

    @Test("HMAC-SHA256 RFC 4231 case 2, HMAC-SHA1 RFC 2202 case 2")
    func hmacKnownAnswers() {
        let key = Array("Jefe".utf8)
        let data = Array("what do ya want for nothing?".utf8)
        #expect(
            HMAC.authenticate(.sha256, key: key, data: data).hexString
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        #expect(HMAC.authenticate(.sha1, key: key, data: data).hexString == "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79")
    }

    @Test("HMAC-SHA256 against every Wycheproof vector")
    func hmacWycheproof() throws {
        let file = try Fixtures.wycheproof("hmac_sha256_test.json")
        var checked = 0
        for group in file["testGroups"]?.arrayValue ?? [] {
            let tagBytes = Int(group["tagSize"]?.intValue ?? 256) / 8
            for test in group["tests"]?.arrayValue ?? [] {
                let key = hexBytes(test["key"]?.stringValue ?? "")
                let msg = hexBytes(test["msg"]?.stringValue ?? "")
                let tag = hexBytes(test["tag"]?.stringValue ?? "")
                let mac = Array(HMAC.authenticate(.sha256, key: key, data: msg).prefix(tagBytes))
                let matches = ConstantTime.equals(mac, tag)
                let id = test["tcId"]?.intValue ?? -1
                #expect(matches == (test["result"]?.stringValue == "valid"), "tcId \(id)")
                checked += 1
            }
        }
        #expect(checked > 100)
    }

    @Test func constantTimeCompare() {
        #expect(ConstantTime.equals("secret", "secret"))
        #expect(!ConstantTime.equals("secret", "secreT"))
        #expect(!ConstantTime.equals("secret", "secret1"))
        #expect(ConstantTime.equals([UInt8](), [UInt8]()))
    }

    @Test func randomBytesDiffer() throws {
        let a = try SecureRandom.bytes(32)
        let b = try SecureRandom.bytes(32)
        #expect(a.count == 32 && a != b)
        #expect(try SecureRandom.token().utf8.count == 43)
    }

    /// Identifiers come from blocks of 4 KiB of the DRBG's output: across several blocks every one is new, none
    /// repeats eight or more of a neighbour's bytes shifted (each takes the next bytes, not overlapping ones), and each has its size.
    @Test(arguments: [16, 48]) func identifiersAreUniqueAcrossBlocks(byteCount: Int) throws {
        var seen = Set<[UInt8]>()
        var previous: [UInt8]?
        for _ in 0..<(3 * 4096 / byteCount + 7) {
            let text = try SecureRandom.identifier(byteCount: byteCount)
            let bytes = try #require(Base64URL.decode(text))
            #expect(bytes.count == byteCount)
            #expect(seen.insert(bytes).inserted, "a repeated identifier")
            if let previous {
                for shift in 1...(byteCount - 8) {
                    #expect(Array(previous[shift...]) != Array(bytes[..<(byteCount - shift)]))
                }
            }
            previous = bytes
        }
    }
}

@Suite("PKCE (RFC 7636)")
struct PKCETests {
    @Test("Appendix B vector")
    func appendixB() throws {
        let pkce = try #require(PKCE(verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"))
        #expect(pkce.challenge == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
        #expect(PKCE.verify(verifier: pkce.verifier, challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"))
        #expect(!PKCE.verify(verifier: pkce.verifier, challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cN"))
    }

    @Test func generatedVerifiersAreValidAndFresh() throws {
        let a = try PKCE.generate()
        let b = try PKCE.generate()
        #expect(PKCE.isValidVerifier(a.verifier) && a.verifier != b.verifier)
        #expect(PKCE.isValidS256Challenge(a.challenge))
    }

    @Test(
        "rejects malformed verifiers",
        arguments: [
            "short", String(repeating: "a", count: 129), String(repeating: "a", count: 42) + "!",
            String(repeating: "é", count: 43),
        ])
    func rejectsMalformed(_ verifier: String) {
        #expect(PKCE(verifier: verifier) == nil)
    }
}
