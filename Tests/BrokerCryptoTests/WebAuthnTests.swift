import BrokerCore
import BrokerCrypto
import BrokerTesting
import Testing

@Suite("CBOR: what authenticators write, and what is refused")
struct CBORTests {
    @Test func itemsRoundTrip() throws {
        let item: CBOR = .map([
            .init(.int(1), .int(2)), .init(.int(-3), .bytes([1, 2, 3])), .init(.text("fmt"), .text("none")),
            .init(
                .int(-257), .array([.bool(true), .bool(false), .null, .undefined, .int(1_000_000), .int(-1_000_000)])),
            .init(.int(24), .unsigned(UInt64.max)), .init(.int(-25), .negative(UInt64.max)),
        ])
        #expect(try CBORReader.decode(item.encoded) == item)
        #expect(item[int: -3]?.bytesValue == [1, 2, 3] && item[text: "fmt"]?.textValue == "none")
        #expect(CBOR.negative(UInt64.max).intValue == nil && CBOR.int(-257).intValue == -257)
        // RFC 8949 Appendix A examples.
        #expect(CBOR.int(100).encoded == [0x18, 0x64] && CBOR.int(-1000).encoded == [0x39, 0x03, 0xE7])
        // A longer head than needed is well-formed and read.
        #expect(try CBORReader.decode([0x19, 0x00, 0x01]) == .unsigned(1))
    }

    @Test(arguments: [
        ([UInt8](), "ends early"),
        ([0x18], "ends early"),
        ([0x44, 0x01, 0x02], "ends early"),
        ([0x9F, 0x01, 0xFF], "indefinite"),
        ([0x5F, 0x41, 0x00, 0xFF], "indefinite"),
        ([0xC1, 0x01], "tags"),
        ([0xF9, 0x3C, 0x00], "floats"),
        ([0xFA, 0, 0, 0, 0], "floats"),
        ([0xF8, 0x20], "simple value"),
        ([0x1C], "reserved"),
        ([0x62, 0xC3, 0x28], "UTF-8"),
        ([0xA2, 0x01, 0x01, 0x01, 0x02], "duplicate"),
        // One key written twice, once with a longer head than needed (-1 as 0x20 and as 0x38 0x00; 1 as 0x01 and
        // 0x18 0x01; "a" with a one-byte length): still one key. Found by the webauthn fuzzer.
        ([0xA2, 0x38, 0x00, 0x00, 0x20, 0xF6], "duplicate"),
        ([0xA2, 0x01, 0x00, 0x18, 0x01, 0x00], "duplicate"),
        ([0xA2, 0x61, 0x61, 0x00, 0x78, 0x01, 0x61, 0x00], "duplicate"),
        ([0xA1, 0x40, 0x01], "map key"),
        ([0x01, 0x02], "after the CBOR item"),
        ([0x9B, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], "longer than its bytes"),
        ([0xBB, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], "longer than its bytes"),
        ([0x5B, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], "ends early"),
        ([UInt8](repeating: 0x81, count: 40) + [0x01], "deeper"),
    ])
    func malformedCBORIsRefusedWithItsReason(bytes: [UInt8], says: String) {
        #expect {
            _ = try CBORReader.decode(bytes)
        } throws: { error in
            (error as? CBORError)?.description.contains(says) == true
        }
    }

    /// RT3-9: duplicate keys were found by comparing each key with every other (`String ==`): a 40 KB map cost
    /// most of a second. Maps are capped at 64 entries, and duplicates found by their encoded bytes.
    @Test(.bug(id: "RT3-9")) func mapsAreCappedAndDuplicatesFoundByTheirBytes() throws {
        func map(_ keys: [CBOR]) -> CBOR { .map(keys.map { CBOR.Entry($0, .int(0)) }) }
        let sixtyFour = map((0..<64).map { CBOR.text("k\($0)") })
        #expect(try CBORReader.decode(sixtyFour.encoded) == sixtyFour)
        let mixed = map((0..<32).map { CBOR.int($0) } + (0..<32).map { CBOR.int(-1 - $0) })
        #expect(try CBORReader.decode(mixed.encoded) == mixed, "1 and -1 are different keys")
        for tooMany in [65, 5_000] {
            let flood = map((0..<tooMany).map { CBOR.text("key-\($0)") })
            #expect {
                _ = try CBORReader.decode(flood.encoded)
            } throws: { error in
                (error as? CBORError)?.description.contains("at most 64") == true
            }
        }
        for duplicate in [map([.text("a"), .text("b"), .text("a")]), map((0..<63).map { CBOR.int($0) } + [.int(62)])] {
            #expect {
                _ = try CBORReader.decode(duplicate.encoded)
            } throws: { error in
                (error as? CBORError)?.description.contains("duplicate") == true
            }
        }
    }
}

@Suite("WebAuthn relying party: registration and sign-in checks")
struct WebAuthnRelyingPartyTests {
    static let rp = WebAuthnRelyingParty(id: "localhost", origins: ["http://localhost:8787"])
    static let ceremony = SoftAuthenticator.Ceremony(origin: "http://localhost:8787", rpID: "localhost")

    static func registered(_ authenticator: SoftAuthenticator, format: String = "none") throws
        -> WebAuthnRelyingParty.Registration
    {
        let challenge = try SecureRandom.bytes(32)
        let response = try authenticator.register(
            challenge: challenge, userHandle: try SecureRandom.bytes(32), ceremony, format: format)
        return try rp.register(
            clientDataJSON: response.clientDataJSON, attestationObject: try #require(response.attestationObject),
            challenge: challenge, requireUserVerification: true)
    }

    static func signIn(
        _ authenticator: SoftAuthenticator, key: COSEKey, stored: UInt32,
        _ ceremony: SoftAuthenticator.Ceremony = ceremony,
        challenge: [UInt8]? = nil, issued: [UInt8]? = nil
    ) throws -> WebAuthnRelyingParty.Assertion {
        let challenge = try challenge ?? SecureRandom.bytes(32)
        let response = try authenticator.assert(challenge: challenge, ceremony)
        return try rp.authenticate(
            clientDataJSON: response.clientDataJSON, authenticatorData: try #require(response.authenticatorData),
            signature: try #require(response.signature), challenge: issued ?? challenge, publicKey: key,
            storedSignCount: stored, requireUserVerification: true)
    }

    @Test(arguments: COSEKey.Algorithm.allCases, ["none", "packed"])
    func eachAlgorithmRegistersAndSignsIn(algorithm: COSEKey.Algorithm, format: String) throws {
        let authenticator = try SoftAuthenticator(algorithm: algorithm, counter: 5)
        let registration = try Self.registered(authenticator, format: format)
        #expect(registration.credentialID == authenticator.credentialID && registration.signCount == 6)
        #expect(registration.publicKey.algorithm == algorithm && registration.attestationFormat == format)
        // The stored key is the bytes the authenticator wrote, and reads back.
        let stored = try COSEKey(encoded: registration.publicKey.encoded)
        let first = try Self.signIn(authenticator, key: stored, stored: registration.signCount)
        #expect(first.signCount == 7 && first.flags.contains(.userVerified))
    }

    @Test func aSyncedPasskeyReportsZeroEveryTime() throws {
        let authenticator = try SoftAuthenticator(counter: nil)
        let registration = try Self.registered(authenticator)
        #expect(registration.signCount == 0)
        for _ in 0..<3 {
            #expect(try Self.signIn(authenticator, key: registration.publicKey, stored: 0).signCount == 0)
        }
    }

    @Test(arguments: [(UInt32(7), UInt32(7)), (7, 3), (7, 0), (0, 0)] as [(UInt32, UInt32)])
    func aCounterThatDoesNotIncreaseIsRefused(stored: UInt32, presented: UInt32) throws {
        let authenticator = try SoftAuthenticator(counter: 1)
        let registration = try Self.registered(authenticator)
        var ceremony = Self.ceremony
        ceremony.counter = presented
        if stored == 0 && presented == 0 {
            #expect(try Self.signIn(authenticator, key: registration.publicKey, stored: 0, ceremony).signCount == 0)
            return
        }
        #expect(
            throws: WebAuthnError.refused(
                "the passkey's signature counter did not increase (\(presented) after \(stored))")
        ) {
            _ = try Self.signIn(authenticator, key: registration.publicKey, stored: stored, ceremony)
        }
    }

    /// Each thing a relying party refuses, at sign-in.
    @Test(arguments: ["origin", "rp", "up", "uv", "signature", "type", "crossOrigin", "challenge"])
    func aSignInIsRefused(what: String) throws {
        let authenticator = try SoftAuthenticator()
        let registration = try Self.registered(authenticator)
        var ceremony = Self.ceremony
        var issued: [UInt8]?
        switch what {
        case "origin": ceremony.origin = "http://localhost:9999"
        case "rp": ceremony.rpID = "example.com"
        case "up": ceremony.userPresent = false
        case "uv": ceremony.userVerified = false
        case "signature": ceremony.corruptSignature = true
        case "type": ceremony.type = "webauthn.create"
        case "crossOrigin": ceremony.crossOrigin = true
        default: issued = try SecureRandom.bytes(32)
        }
        #expect {
            _ = try Self.signIn(authenticator, key: registration.publicKey, stored: 0, ceremony, issued: issued)
        } throws: { error in
            guard case .refused(let reason) = error as? WebAuthnError else { return false }
            let expected = [
                "origin": "another origin", "rp": "another relying party", "up": "not present",
                "uv": "not verified", "signature": "does not verify", "type": "type is not webauthn.get",
                "crossOrigin": "cross-origin", "challenge": "another challenge",
            ]
            return reason.contains(expected[what] ?? "?")
        }
    }

    /// RT3-9: an assertion's authenticator data was parsed — extension outputs included — before its signature
    /// was checked. A 40 KB extension map under a signature the key never made is refused for its signature,
    /// before the map is read.
    @Test(.bug(id: "RT3-9")) func theSignatureIsCheckedBeforeTheOptionalParts() throws {
        let registration = try Self.registered(try SoftAuthenticator())
        let challenge = try SecureRandom.bytes(32)
        let clientData: JSONValue = [
            "type": "webauthn.get", "challenge": .string(Base64URL.encode(challenge)),
            "origin": "http://localhost:8787",
        ]
        let flood = CBOR.map((0..<5_000).map { CBOR.Entry(.text("extension-\($0)"), .bytes([1])) })
        let authenticatorData =
            Digest.sha256("localhost") + [0x01 | 0x04 | 0x80, 0, 0, 0, 1] + flood.encoded
        #expect(authenticatorData.count > 40_000)
        #expect(throws: WebAuthnError.refused("the passkey's signature does not verify")) {
            _ = try Self.rp.authenticate(
                clientDataJSON: clientData.serializedBytes, authenticatorData: authenticatorData,
                signature: try SecureRandom.bytes(64), challenge: challenge, publicKey: registration.publicKey,
                storedSignCount: 0, requireUserVerification: true)
        }
    }

    /// Another key than the one registered signs: refused.
    @Test func anotherKeysSignatureIsRefused() throws {
        let registration = try Self.registered(try SoftAuthenticator())
        #expect(throws: WebAuthnError.refused("the passkey's signature does not verify")) {
            _ = try Self.signIn(try SoftAuthenticator(), key: registration.publicKey, stored: 0)
        }
    }

    @Test(arguments: ["origin", "rp", "up", "selfSignature", "challenge", "type"])
    func aRegistrationIsRefused(what: String) throws {
        let authenticator = try SoftAuthenticator()
        var ceremony = Self.ceremony
        let challenge = try SecureRandom.bytes(32)
        var issued = challenge
        switch what {
        case "origin": ceremony.origin = "https://evil.example"
        case "rp": ceremony.rpID = "evil.example"
        case "up": ceremony.userPresent = false
        case "selfSignature": ceremony.corruptSignature = true
        case "type": ceremony.type = "webauthn.get"
        default: issued = try SecureRandom.bytes(32)
        }
        let response = try authenticator.register(
            challenge: challenge, userHandle: [1], ceremony, format: what == "selfSignature" ? "packed" : "none")
        #expect(throws: WebAuthnError.self) {
            _ = try Self.rp.register(
                clientDataJSON: response.clientDataJSON, attestationObject: try #require(response.attestationObject),
                challenge: issued, requireUserVerification: true)
        }
    }

    @Test func malformedAuthenticatorDataAndKeysAreRefused() throws {
        let authenticator = try SoftAuthenticator()
        let response = try authenticator.register(challenge: [1], userHandle: [1], Self.ceremony)
        let object = try CBORReader.decode(try #require(response.attestationObject))
        let data = try #require(object[text: "authData"]?.bytesValue)
        #expect(try AuthenticatorData(data).credential?.id == authenticator.credentialID)
        // Cut short anywhere, or with a byte after it: refused with a reason, never a crash.
        for length in [0, 36, 37, 54, 55, 60, data.count - 1] {
            #expect(throws: WebAuthnError.self) { _ = try AuthenticatorData(Array(data.prefix(length))) }
        }
        #expect(throws: WebAuthnError.malformed("1 bytes after the authenticator data's announced parts")) {
            _ = try AuthenticatorData(data + [0])
        }
        // Backed up but not backup eligible.
        var flags = data
        flags[32] |= 0x10
        #expect(throws: WebAuthnError.malformed("the backed-up flag without the backup-eligible flag")) {
            _ = try AuthenticatorData(flags)
        }
        // COSE keys: an unknown algorithm, a wrong curve, a point off the curve.
        let good = try authenticator.key.coseKey(.es256)
        func replacing(_ label: Int, with value: CBOR) -> CBOR {
            .map((good.mapValue ?? []).map { $0.key.intValue == label ? .init($0.key, value) : $0 })
        }
        #expect(throws: WebAuthnError.unsupported("COSE algorithm -36 (supported: ES256 -7, EdDSA -8, RS256 -257)")) {
            _ = try COSEKey(encoded: replacing(3, with: .int(-36)).encoded)
        }
        #expect(throws: WebAuthnError.unsupported("an EC2 key not on P-256")) {
            _ = try COSEKey(encoded: replacing(-1, with: .int(2)).encoded)
        }
        #expect(throws: WebAuthnError.self) {
            _ = try COSEKey(encoded: replacing(-3, with: .bytes([UInt8](repeating: 7, count: 32))).encoded)
        }
    }
}
