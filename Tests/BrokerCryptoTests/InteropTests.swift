import BrokerCore
import BrokerCrypto
import BrokerTesting
import Foundation
import Testing

/// Cross-language checks: Python's joserfc verifies our tokens and signs tokens we must accept, and we reject a
/// catalogue of forgeries it builds. Runs `Tests/Interop/jose_interop.py` with `python3` (or `BROKER_PYTHON`).
@Suite("Interop with joserfc")
struct InteropTests {
    static let issuer = "https://broker.interop.test"
    static let audience = "broker"

    struct Exchange {
        var ours: [AsymmetricKey]
        var theirs: JSONValue
    }

    static func runPython() async throws -> Exchange {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "broker-interop-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }

        let keys = try [KeyKind.ecP256, .rsa(bits: 2048), .ed25519].map { try AsymmetricKey.generate($0) }
        let now = Int64(Date().timeIntervalSince1970)
        var tokens: [String: JSONValue] = [:]
        var jwks: [JSONValue] = []
        var privates: [String: JSONValue] = [:]
        for key in keys {
            let signer = try JWTSigner(key: key)
            tokens[key.algorithm.rawValue] = .string(
                try signer.sign(claims: [
                    "iss": .string(issuer), "aud": .string(audience), "sub": .string("ours-\(key.algorithm.rawValue)"),
                    "iat": .int(now), "nbf": .int(now), "exp": .int(now + 300),
                ]))
            jwks.append(try #require(try JSONValue.parse(Array(JSONEncoder().encode(try key.jwk())))))
            if key.kind != .ed25519 {
                let secret: JSONValue = try #require(
                    try JSONValue.parse(Array(JSONEncoder().encode(try key.jwk(includePrivate: true)))))
                privates[key.algorithm.rawValue] = secret
            }
        }
        let ours: JSONValue = .object([
            "jwks": .object(["keys": .array(jwks)]), "tokens": .object(tokens), "private": .object(privates),
            "issuer": .string(issuer), "audience": .string(audience),
        ])
        try Data(ours.serialized().utf8).write(to: folder.appendingPathComponent("ours.json"))

        let result = try await ProcessRunner.python("jose_interop.py", [folder.path])
        guard result.status == 0 else {
            throw FixtureError("jose_interop.py failed (\(result.status)): \(result.stderr)")
        }
        let theirs = try Data(contentsOf: folder.appendingPathComponent("theirs.json"))
        return Exchange(ours: keys, theirs: try #require(JSONValue.parse(Array(theirs))))
    }

    @Test("joserfc verifies our ES256, RS256 and EdDSA tokens; we verify its tokens; we reject its forgeries")
    func roundTrip() async throws {
        let exchange = try await InteropTests.runPython()
        let theirs = exchange.theirs

        // 1. Python verified each of ours (it exits non-zero otherwise); check it saw all three.
        for alg in ["ES256", "RS256", "EdDSA"] {
            #expect(theirs["verified"]?[alg]?.stringValue == "ours-\(alg)")
        }

        // 2. Tokens joserfc signed verify here against its JWKS.
        let jwks = try JWKSet.parse(Array(theirs["jwks"]!.serialized().utf8))
        let theirVerifier = JWTVerifier(
            keys: try JWTKeySet(jwks: jwks),
            options: .init(issuer: InteropTests.issuer, audience: InteropTests.audience))
        let now = Int64(Date().timeIntervalSince1970)
        for alg in ["ES256", "RS256", "EdDSA"] {
            let token = try #require(theirs["tokens"]?[alg]?.stringValue)
            let verified = try theirVerifier.verify(token, now: now)
            #expect(verified.subject == "made-by-joserfc" && verified.algorithm.rawValue == alg)
        }

        // 3. The forged set fails against our own keys, each for its own reason.
        var ourKeys = JWTKeySet()
        for key in exchange.ours { try ourKeys.add(key) }
        let ourVerifier = JWTVerifier(
            keys: ourKeys, options: .init(issuer: InteropTests.issuer, audience: InteropTests.audience))
        let forged = try #require(theirs["forged"]?.objectValue)
        let expected: [String: (JWTError) -> Bool] = [
            "alg_none": { $0 == .algorithmNone },
            "alg_none_with_signature": { $0 == .algorithmNone },
            "alg_None": { $0 == .algorithmNone },
            "hs256_with_public_pem": { $0 == .algorithmNotAllowed("HS256") },
            "hs256_with_public_pem_no_kid": { $0 == .algorithmNotAllowed("HS256") },
            "zero_signature": { $0 == .invalidSignature },
            "der_signature": { $0 == .invalidSignature },
            "tampered_payload": { $0 == .invalidSignature },
            "unknown_kid": { $0 == .unknownKeyID("not-a-known-kid") },
            "truncated": { $0 == .invalidSignature || $0 == .malformed("signature is not base64url") },
            "four_segments": { $0 == .malformed("expected 3 segments, found 4") },
            "oversized": { if case .tooLarge = $0 { true } else { false } },
        ]
        #expect(Set(forged.keys) == Set(expected.keys))
        for (name, value) in forged {
            let token = try #require(value.stringValue)
            do {
                _ = try ourVerifier.verify(token, now: now)
                Issue.record("forged token \(name) was accepted")
            } catch {
                #expect(expected[name]?(error) == true, "\(name): rejected for the wrong reason: \(error)")
            }
        }
    }
}
