import BrokerCore
import BrokerCrypto
import BrokerTesting
import Foundation
import Testing

@Suite("JWS known answers and Wycheproof")
struct JWSVectorTests {
    @Test("RFC 7515 A.2: RS256 re-signs byte for byte and verifies")
    func rfc7515A2() throws {
        let vector = try #require(try Fixtures.rfcVectors()["rfc7515_a2"])
        let key = try AsymmetricKey(jwk: try vector["jwk"]!.decode(JWK.self))
        let input = Array(vector["signing_input"]!.stringValue!.utf8)
        let signature = try key.sign(input)
        #expect(Base64URL.encode(signature) == vector["signature"]?.stringValue)
        #expect(try key.publicKey().verify(signature: signature, message: input))
    }

    @Test("RFC 7515 A.3: ES256 published signature verifies; a fresh one differs and verifies")
    func rfc7515A3() throws {
        let vector = try #require(try Fixtures.rfcVectors()["rfc7515_a3"])
        let key = try AsymmetricKey(jwk: try vector["jwk"]!.decode(JWK.self))
        let input = Array(vector["signing_input"]!.stringValue!.utf8)
        let published = try #require(Base64URL.decode(vector["signature"]!.stringValue!))
        #expect(published.count == 64)
        #expect(key.verify(signature: published, message: input))
        let fresh = try key.sign(input)
        #expect(fresh.count == 64 && fresh != published)
        #expect(key.verify(signature: fresh, message: input))
        #expect(!key.verify(signature: published, message: input + [0]))
    }

    @Test("RFC 8037 A.4/A.5: Ed25519 signs deterministically and verifies")
    func rfc8037() throws {
        let vector = try #require(try Fixtures.rfcVectors()["rfc8037_a4"])
        let key = try AsymmetricKey(jwk: try vector["jwk"]!.decode(JWK.self))
        let input = Array(vector["signing_input"]!.stringValue!.utf8)
        let signature = try key.sign(input)
        #expect(Base64URL.encode(signature) == vector["signature"]?.stringValue)
        let publicKey = try AsymmetricKey(jwk: try vector["jwk"]!.decode(JWK.self).publicOnly)
        #expect(publicKey.verify(signature: signature, message: input))
    }

    @Test("Wycheproof ECDSA P-256 P1363 (raw r||s)")
    func ecdsaP1363() throws {
        try runSignatureFile("ecdsa_secp256r1_sha256_p1363_test.json", expectAllInvalid: false)
    }

    @Test("Wycheproof ECDSA P-256 DER: a JWS verifier accepts none of them")
    func ecdsaDER() throws {
        try runSignatureFile("ecdsa_secp256r1_sha256_test.json", expectAllInvalid: true)
    }

    @Test("Wycheproof Ed25519")
    func ed25519() throws {
        try runSignatureFile("ed25519_test.json", expectAllInvalid: false)
    }

    @Test("Wycheproof RSA PKCS#1 v1.5 2048 SHA-256 verification")
    func rsaVerify() throws {
        try runSignatureFile("rsa_signature_2048_sha256_test.json", expectAllInvalid: false)
    }

    @Test("Wycheproof RSA PKCS#1 v1.5 2048 signature generation (deterministic)")
    func rsaSign() throws {
        let file = try Fixtures.wycheproof("rsa_pkcs1_2048_sig_gen_test.json")
        var checked = 0
        for group in file["testGroups"]?.arrayValue ?? [] where group["sha"]?.stringValue == "SHA-256" {
            let key = try AsymmetricKey(pem: group["privateKeyPem"]!.stringValue!)
            for test in group["tests"]?.arrayValue ?? [] where test["result"]?.stringValue == "valid" {
                let sig = try key.sign(hexBytes(test["msg"]!.stringValue!))
                #expect(sig.hexString == test["sig"]?.stringValue, "tcId \(test["tcId"]?.intValue ?? -1)")
                checked += 1
            }
        }
        #expect(checked >= 5)
    }

    /// Runs a Wycheproof signature-verification file through ``AsymmetricKey/verify``.
    private func runSignatureFile(_ name: String, expectAllInvalid: Bool) throws {
        let file = try Fixtures.wycheproof(name)
        var accepted = 0
        var checked = 0
        for group in file["testGroups"]?.arrayValue ?? [] {
            let key: AsymmetricKey
            do {
                key = try AsymmetricKey(pem: try #require(group["publicKeyPem"]?.stringValue))
            } catch let error as CryptoError {
                // Keys we refuse outright (e.g. RSA below 2048 bits) cannot accept anything.
                #expect(error == .weakKey || error == .unsupportedKey, "\(error)")
                continue
            }
            for test in group["tests"]?.arrayValue ?? [] {
                let id = test["tcId"]?.intValue ?? -1
                let signature = try #require(test["sig"]?.stringValue)
                let message = try #require(test["msg"]?.stringValue)
                let ok = key.verify(signature: hexBytes(signature), message: hexBytes(message))
                let result = test["result"]?.stringValue
                if ok { accepted += 1 }
                if expectAllInvalid {
                    #expect(!ok, "tcId \(id) accepted a DER signature")
                } else if result == "valid" {
                    #expect(ok, "tcId \(id) should verify: \(test["comment"]?.stringValue ?? "")")
                } else if result == "invalid" {
                    #expect(!ok, "tcId \(id) should be rejected: \(test["comment"]?.stringValue ?? "")")
                }
                checked += 1
            }
        }
        #expect(checked > 50, "\(name) checked \(checked)")
        if !expectAllInvalid { #expect(accepted > 0) }
    }

    /// Ids whose expected result in this Wycheproof commit is wrong (see shared/vectors/README.md).
    static let knownFaultyJWS: Set<Int64> = [346, 347, 350, 351, 367, 370, 372, 373]

    @Test("Wycheproof JSON Web Signature file: our verifier never accepts an invalid token")
    func jwsFile() throws {
        let file = try Fixtures.wycheproof("json_web_signature_test.json")
        var acceptedValid = 0
        for group in file["testGroups"]?.arrayValue ?? [] {
            let jwkValue = group["public"] ?? group["private"]
            var keys = JWTKeySet()
            if let jwkValue, let jwk = try? jwkValue.decode(JWK.self), let key = try? AsymmetricKey(jwk: jwk.publicOnly)
            {
                try keys.add(key, kid: jwk.kid ?? "only")
            }
            let verifier = JWTVerifier(keys: keys)
            for test in group["tests"]?.arrayValue ?? [] {
                let id = test["tcId"]?.intValue ?? -1
                guard !JWSVectorTests.knownFaultyJWS.contains(id), let token = test["jws"]?.stringValue else {
                    continue
                }
                let accepted = (try? verifier.verifySignature(token)) != nil
                switch test["result"]?.stringValue {
                case "invalid":
                    #expect(!accepted, "tcId \(id) (\(test["comment"]?.stringValue ?? "")) was accepted")
                case "valid":
                    // Valid tokens under algorithms we support must verify; HS*/PS*/ES384... are refused by design.
                    if accepted { acceptedValid += 1 }
                    if let alg = JWTVerifier.peekAlgorithm(token), JWSAlgorithm(rawValue: alg) != nil, !keys.isEmpty {
                        #expect(accepted, "tcId \(id) (\(alg)) should verify")
                    }
                default:
                    break
                }
            }
        }
        #expect(acceptedValid > 0)
    }
}

extension JWTVerifier {
    /// The header `alg` of a token, unverified; for tests only.
    static func peekAlgorithm(_ token: String) -> String? {
        guard let first = token.split(separator: ".").first, let bytes = Base64URL.decode(first) else { return nil }
        return JSONValue.parse(bytes)?["alg"]?.stringValue
    }
}
