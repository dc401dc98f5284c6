import BrokerCore
import BrokerCrypto
import BrokerTesting
import Foundation
import Testing

@Suite("Keys: generation, PEM, JWK, thumbprints")
struct KeyTests {
    static let kinds: [KeyKind] = [.ecP256, .rsa(bits: 2048), .ed25519]

    @Test("RFC 7638 §3.1 thumbprint")
    func rfc7638() throws {
        let vector = try #require(try Fixtures.rfcVectors()["rfc7638_31"])
        let jwk = try vector["jwk"]!.decode(JWK.self)
        #expect(try jwk.thumbprint() == vector["thumbprint"]?.stringValue)
        #expect(try AsymmetricKey(jwk: jwk).thumbprint() == vector["thumbprint"]?.stringValue)
    }

    @Test("RFC 8037 A.1-A.3: Ed25519 key import and thumbprint")
    func rfc8037Key() throws {
        let vector = try #require(try Fixtures.rfcVectors()["rfc8037_a4"])
        let jwk = try vector["jwk"]!.decode(JWK.self)
        let key = try AsymmetricKey(jwk: jwk)
        #expect(key.isPrivate && key.kind == .ed25519)
        #expect(try key.thumbprint() == vector["thumbprint"]?.stringValue)
        #expect(try key.jwk(includePrivate: true).d == jwk.d)
    }

    @Test("generate → PEM → key and JWK → key round trips", arguments: kinds)
    func roundTrips(kind: KeyKind) throws {
        let key = try AsymmetricKey.generate(kind)
        #expect(key.isPrivate && key.kind == kind)
        let fromPEM = try AsymmetricKey(pem: try key.privateKeyPEM())
        #expect(fromPEM.isPrivate)
        #expect(try fromPEM.thumbprint() == key.thumbprint())
        #expect(try key.privateKeyPEM().hasPrefix("-----BEGIN PRIVATE KEY-----"))

        let publicPEM = try key.publicKeyPEM()
        #expect(publicPEM.hasPrefix("-----BEGIN PUBLIC KEY-----"))
        let publicKey = try AsymmetricKey(pem: publicPEM)
        #expect(!publicKey.isPrivate)
        #expect(try publicKey.thumbprint() == key.thumbprint())

        let privateJWK = try key.jwk(includePrivate: true)
        #expect(privateJWK.hasPrivateMembers)
        let fromJWK = try AsymmetricKey(jwk: privateJWK)
        let message = Array("round trip".utf8)
        #expect(publicKey.verify(signature: try fromJWK.sign(message), message: message))

        let publicJWK = try key.jwk()
        #expect(!publicJWK.hasPrivateMembers)
        #expect(
            publicJWK.kid == (try key.thumbprint()) && publicJWK.alg == kind.algorithm.rawValue
                && publicJWK.use == "sig")
        #expect(try AsymmetricKey(jwk: publicJWK).verify(signature: try key.sign(message), message: message))
        #expect(throws: CryptoError.invalidKey) { try publicKey.sign(message) }
    }

    @Test("one key signs and verifies from many tasks at once (pooled OpenSSL contexts)", arguments: kinds)
    func concurrentUse(kind: KeyKind) async throws {
        let key = try AsymmetricKey.generate(kind)
        let publicKey = try key.publicKey()
        let results = try await withThrowingTaskGroup(of: Bool.self) { group in
            for index in 0..<200 {
                group.addTask {
                    let message = Array("message \(index)".utf8)
                    let signature = try key.sign(message)
                    // A wrong message must fail even on a context that just verified a good one.
                    return publicKey.verify(signature: signature, message: message)
                        && !publicKey.verify(signature: signature, message: message + [1])
                }
            }
            return try await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(results.count == 200 && results.allSatisfy { $0 })
    }

    @Test func rsaBelow2048IsRefused() throws {
        #expect(throws: CryptoError.weakKey) { try AsymmetricKey.generate(.rsa(bits: 1024)) }
        // A 1024-bit PEM made by OpenSSL itself.
        let pem = try #require(String(data: try Fixtures.local("rsa1024.pem"), encoding: .utf8))
        #expect(throws: CryptoError.weakKey) { try AsymmetricKey(pem: pem) }
    }

    @Test func otherCurvesAreRefused() throws {
        let pem = try #require(String(data: try Fixtures.local("p384.pem"), encoding: .utf8))
        #expect(throws: CryptoError.unsupportedKey) { try AsymmetricKey(pem: pem) }
    }

    @Test("garbage PEM", arguments: ["", "hello", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"])
    func garbagePEM(_ text: String) {
        #expect(throws: CryptoError.invalidKey) { try AsymmetricKey(pem: text) }
    }

    @Test func encryptedPEMIsRefusedWithoutPrompting() throws {
        let pem = try #require(String(data: try Fixtures.local("encrypted.pem"), encoding: .utf8))
        #expect {
            try AsymmetricKey(pem: pem)
        } throws: { error in
            (error as? CryptoError)?.reason.contains("encrypted") == true
        }
    }

    @Test("invalid JWKs are refused")
    func invalidJWKs() throws {
        let ec = try AsymmetricKey.generate(.ecP256).jwk(includePrivate: true)
        let other = try AsymmetricKey.generate(.ecP256).jwk(includePrivate: true)

        var mismatched = ec
        mismatched.d = other.d
        #expect(throws: CryptoError.invalidKey) { try AsymmetricKey(jwk: mismatched) }

        var offCurve = ec.publicOnly
        offCurve.y = offCurve.x
        #expect(throws: CryptoError.invalidKey) { try AsymmetricKey(jwk: offCurve) }

        var shortX = ec.publicOnly
        shortX.x = Base64URL.encode([UInt8](repeating: 1, count: 31))
        #expect(throws: CryptoError.invalidKey) { try AsymmetricKey(jwk: shortX) }

        var wrongCurve = ec.publicOnly
        wrongCurve.crv = "P-384"
        #expect(throws: CryptoError.unsupportedKey) { try AsymmetricKey(jwk: wrongCurve) }

        var wrongAlg = ec.publicOnly
        wrongAlg.alg = "RS256"
        #expect(throws: CryptoError.unsupportedKey) { try AsymmetricKey(jwk: wrongAlg) }

        var encryption = ec.publicOnly
        encryption.use = "enc"
        #expect(throws: CryptoError.unsupportedKey) { try AsymmetricKey(jwk: encryption) }

        #expect(throws: CryptoError.unsupportedKey) { try AsymmetricKey(jwk: JWK(kty: "oct")) }

        var ed = try AsymmetricKey.generate(.ed25519).jwk(includePrivate: true)
        ed.x = try AsymmetricKey.generate(.ed25519).jwk().x
        #expect(throws: CryptoError.invalidKey) { try AsymmetricKey(jwk: ed) }
    }

    /// Found by Fuzz/jwk: OpenSSL's RSA public-key check tests the modulus with random bases, so a malformed
    /// odd modulus imported on one try and not on the next. The broker's own checks are deterministic.
    @Test func rsaPublicKeyImportIsDeterministic() throws {
        let rsa = try AsymmetricKey.generate(.rsa(bits: 2048)).jwk().publicOnly
        let modulus = try #require(rsa.n)
        var bytes = try #require(Base64URL.decode(modulus))
        bytes[bytes.count / 2] ^= 0x5A  // no longer the product of the key's two primes, still odd
        var malformed = rsa
        malformed.n = Base64URL.encode(bytes)
        let outcomes = (0..<40).map { _ in (try? AsymmetricKey(jwk: malformed)) != nil }
        #expect(Set(outcomes).count == 1, "the same JWK imported differently: \(outcomes)")

        var even = rsa
        bytes[bytes.count - 1] &= 0xFE
        even.n = Base64URL.encode(bytes)
        #expect(throws: CryptoError.invalidKey) { try AsymmetricKey(jwk: even) }
        for exponent in [
            [0x01, 0x00, 0x00], [0x01], [0x02], [0x03], [0x01, 0x00, 0x01, 0x00], [UInt8](repeating: 0xFF, count: 33),
        ] {
            var bad = rsa
            bad.e = Base64URL.encode(exponent)
            #expect(throws: CryptoError.invalidKey) { try AsymmetricKey(jwk: bad) }
        }
    }

    @Test func jwksParsingSkipsForeignKeys() throws {
        let ec = try AsymmetricKey.generate(.ecP256).jwk()
        let document =
            "{\"keys\":[{\"kty\":\"oct\",\"k\":\"AAAA\"},\(JSONValue.parse(Array(try JSONEncoderShim.encode(ec)))!.serialized())]}"
        let set = try JWKSet.parse(Array(document.utf8))
        let keys = try JWTKeySet(jwks: set)
        #expect(keys.keys.count == 1 && keys.keys[ec.kid!] != nil)
        #expect(throws: CryptoError.invalidEncoding) { try JWKSet.parse(Array("{\"keys\":".utf8)) }
    }
}
