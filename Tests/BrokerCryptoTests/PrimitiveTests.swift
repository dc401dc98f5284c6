import BrokerCore
import BrokerCrypto
import BrokerTesting
import Foundation
import Synchronization
import Testing

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

    /// A key made ready once gives what a one-off HMAC gives: RFC 4231's vectors, an empty key, and messages
    /// of every length around SHA-256's 64-byte block, also from several tasks at once on one key.
    @Test func hmacKeyAgreesWithOneOffHMAC() async throws {
        let rfc = HMACKey(.sha256, key: Array("Jefe".utf8))
        #expect(
            rfc.authenticate(Array("what do ya want for nothing?".utf8)).hexString
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        let long = HMACKey(.sha256, key: [UInt8](repeating: 0xaa, count: 131))
        #expect(
            long.authenticate(Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8)).hexString
                == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
        for key in [[UInt8](), Array("k".utf8), [UInt8](repeating: 7, count: 64)] {
            let ready = HMACKey(.sha256, key: key)
            for count in [0, 1, 55, 63, 64, 65, 200] {
                let message = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31) }
                #expect(ready.authenticate(message) == HMAC.authenticate(.sha256, key: key, data: message))
            }
        }
        let shared = HMACKey(.sha256, key: Array("shared".utf8))
        let answers = await withTaskGroup(of: Bool.self) { group in
            for index in 0..<64 {
                group.addTask {
                    let message = Array("message \(index)".utf8)
                    return shared.authenticate(message)
                        == HMAC.authenticate(.sha256, key: Array("shared".utf8), data: message)
                }
            }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(answers.count == 64 && answers.allSatisfy { $0 })
    }

    /// The pool both key kinds keep their OpenSSL contexts in: the last one given back is the next one taken, no
    /// more than `capacity` are kept (the rest freed at once), and the kept ones are freed when the pool goes;
    /// never one twice. The pointers are stand-ins the counting free function never reads.
    @Test func contextPoolKeepsUpToItsCapacityAndFreesTheRest() {
        let freed = Mutex<[Int]>([])
        do {
            let pool = ContextPool(free: { pointer in
                freed.withLock { $0.append(Int(bitPattern: UnsafeRawPointer(pointer))) }
            })
            #expect(pool.take() == nil)
            let made = (1...(ContextPool.capacity + 3)).map { OpaquePointer(bitPattern: $0 * 16)! }
            for context in made { pool.giveBack(context) }
            #expect(pool.keptCount == ContextPool.capacity)
            #expect(freed.withLock { $0 } == made.suffix(3).map { Int(bitPattern: UnsafeRawPointer($0)) })
            #expect(pool.take() == made[ContextPool.capacity - 1])
            #expect(pool.keptCount == ContextPool.capacity - 1)
        }
        let all = freed.withLock { $0 }
        #expect(all.count == ContextPool.capacity + 2, "one was taken and not given back, so it is not freed")
        #expect(Set(all).count == all.count)
        #expect(!all.contains((ContextPool.capacity) * 16))
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

/// HTTP Basic client credentials (RFC 6749 §2.3.1): what `header(id:secret:)` writes reads back; anything that
/// is not base64 of UTF-8 text with a `:` and valid escapes on both sides is not credentials.
@Suite("HTTP Basic credentials")
struct HTTPBasicTests {
    static func token(_ bytes: [UInt8]) -> String { Base64URL.encodeStandard(bytes) }

    @Test func whatTheHeaderWritesReadsBack() throws {
        for (id, secret) in [("ci", "s3cret"), ("a:b", "c:d"), ("é ü", "+/=%&"), ("", "only-secret"), ("id", "")] {
            let value = HTTPBasic.header(id: id, secret: Secret(secret)).value
            let read = try #require(HTTPBasic.credentials(fromToken: String(value.dropFirst("Basic ".count))))
            #expect(read.id == id && read.secret == secret, "\(id) \(secret)")
        }
        let plus = try #require(HTTPBasic.credentials(fromToken: Self.token(Array("a+b:c+d".utf8))))
        #expect(plus.id == "a b" && plus.secret == "c d", "+ is a space, as in a form")
        let second = try #require(HTTPBasic.credentials(fromToken: Self.token(Array("id:a:b".utf8))))
        #expect(second.id == "id" && second.secret == "a:b", "the first : separates")
    }

    @Test func malformedCredentialsAreNone() {
        let refused: [[UInt8]] = [
            Array("no-colon".utf8),
            Array("id:%ZZ".utf8),
            Array("%4:secret".utf8),
            Array("id:%".utf8),
            Array("id:%C3".utf8),
            // An escape may not complete a broken sequence: the text must be UTF-8 before decoding.
            [UInt8(ascii: "a"), 0xC3] + Array("%A9:b".utf8),
            [0xFF] + Array(":b".utf8),
        ]
        for bytes in refused {
            #expect(HTTPBasic.credentials(fromToken: Self.token(bytes)) == nil, "\(bytes)")
        }
        for token in ["", "!!!!", "aWQ6c2VjcmV0=", "aW Q6c2VjcmV0", "aWQ6c2VjcmV0===="] {
            #expect(HTTPBasic.credentials(fromToken: token) == nil, "\(token)")
        }
        #expect(HTTPBasic.credentials(fromToken: "aWQ6c2VjcmV0")?.secret == "secret")
    }
}
