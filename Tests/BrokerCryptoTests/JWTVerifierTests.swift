import BrokerCore
import BrokerCrypto
import BrokerTesting
import Foundation
import Testing

@Suite("Strict JWT verifier")
struct JWTVerifierTests {
    let now: Int64 = 1_800_000_000
    let key: AsymmetricKey
    let signer: JWTSigner
    let verifier: JWTVerifier

    init() throws {
        key = try AsymmetricKey.generate(.ecP256)
        signer = try JWTSigner(key: key)
        var keys = JWTKeySet()
        try keys.add(key)
        verifier = JWTVerifier(keys: keys, options: .init(issuer: "https://issuer.test", audience: "broker"))
    }

    func claims(_ changes: [String: JSONValue?] = [:]) -> [String: JSONValue] {
        var base: [String: JSONValue] = [
            "iss": "https://issuer.test", "aud": "broker", "sub": "user-1", "iat": .int(now), "nbf": .int(now),
            "exp": .int(now + 600),
        ]
        for (name, value) in changes { base[name] = value }
        return base
    }

    /// A token with a hand-made header, signed with `key`.
    func token(header: [String: JSONValue], claims: [String: JSONValue], signWith: AsymmetricKey? = nil) throws
        -> String
    {
        let input =
            Base64URL.encode(JSONValue.object(header).serializedBytes) + "."
            + Base64URL.encode(JSONValue.object(claims).serializedBytes)
        return input + "." + Base64URL.encode(try (signWith ?? key).sign(Array(input.utf8)))
    }

    func rejects(_ token: String, _ expected: JWTError, options: JWTVerifier.Options? = nil) {
        var verifier = self.verifier
        if let options { verifier.options = options }
        #expect(throws: expected) { try verifier.verify(token, now: now) }
    }

    @Test func acceptsAGoodToken() throws {
        let verified = try verifier.verify(try signer.sign(claims: claims()), now: now)
        #expect(verified.subject == "user-1" && verified.algorithm == .ES256 && verified.kid == signer.kid)
        // Leeway: 30 s past exp is still within the default 60 s.
        #expect(throws: Never.self) { try verifier.verify(try signer.sign(claims: claims()), now: now + 630) }
        // aud as an array.
        #expect(throws: Never.self) {
            try verifier.verify(try signer.sign(claims: claims(["aud": .array(["other", "broker"])])), now: now)
        }
    }

    @Test func rejectsEachBrokenRule() throws {
        let kid = JSONValue.string(signer.kid)
        rejects(try signer.sign(claims: claims(["exp": .int(now - 61)])), .expired)
        rejects(try signer.sign(claims: claims(["nbf": .int(now + 61)])), .notYetValid)
        rejects(try signer.sign(claims: claims(["iat": .int(now + 61)])), .issuedInFuture)
        rejects(try signer.sign(claims: claims(["exp": nil])), .missingClaim("exp"))
        rejects(try signer.sign(claims: claims(["exp": "tomorrow"])), .invalidClaim("exp"))
        rejects(try signer.sign(claims: claims(["iss": "https://evil.test"])), .issuerMismatch("https://evil.test"))
        rejects(try signer.sign(claims: claims(["iss": nil])), .issuerMismatch(nil))
        rejects(try signer.sign(claims: claims(["aud": "other"])), .audienceMismatch)
        rejects(try signer.sign(claims: claims(["aud": .array(["a", "b"])])), .audienceMismatch)
        rejects(try signer.sign(claims: claims(["aud": .int(3)])), .invalidClaim("aud"))
        rejects(try signer.sign(claims: claims(["sub": .int(3)])), .invalidClaim("sub"))
        rejects(try token(header: ["alg": "ES256", "kid": "nope"], claims: claims()), .unknownKeyID("nope"))
        rejects(
            try token(header: ["alg": "ES256", "kid": kid, "crit": .array(["exp"])], claims: claims()),
            .unsupportedCritical(["exp"]))
        rejects(
            try token(header: ["alg": "ES256", "kid": .int(1)], claims: claims()), .invalidHeader("kid is not a string")
        )
        rejects(try token(header: ["kid": kid], claims: claims()), .invalidHeader("alg missing or not a string"))
        rejects(
            try token(header: ["alg": "RS256", "kid": kid], claims: claims()),
            .algorithmMismatch(header: "RS256", key: "ES256"))
        rejects(try token(header: ["alg": "ES384", "kid": kid], claims: claims()), .algorithmNotAllowed("ES384"))
        rejects(try token(header: ["alg": "HS256", "kid": kid], claims: claims()), .algorithmNotAllowed("HS256"))
        rejects(try token(header: ["alg": "none", "kid": kid], claims: claims()), .algorithmNone)
        rejects(try token(header: ["alg": "NoNe"], claims: claims()), .algorithmNone)

        let other = try AsymmetricKey.generate(.ecP256)
        rejects(try token(header: ["alg": "ES256", "kid": kid], claims: claims(), signWith: other), .invalidSignature)

        var typed = verifier.options
        typed.expectedType = "at+jwt"
        rejects(try signer.sign(claims: claims(), type: "JWT"), .unexpectedType("JWT"), options: typed)
        #expect(throws: Never.self) {
            var v = verifier
            v.options = typed
            _ = try v.verify(try signer.sign(claims: claims(), type: "application/at+jwt"), now: now)
        }

        var aged = verifier.options
        aged.maxAge = 300
        rejects(try signer.sign(claims: claims(["iat": .int(now - 400)])), .tooOld, options: aged)
    }

    @Test(
        "the age check does not wrap around for an iat at the bottom of Int64",
        .bug(id: 18, "finding 12: now &- iat with iat = -2^63 passed the max-age check"))
    func ageCheckDoesNotWrap() throws {
        var aged = verifier.options
        aged.maxAge = 300
        for iat in [Int64.min, Int64.min + 1, Int64.min / 2] {
            rejects(try signer.sign(claims: claims(["iat": .int(iat)])), .tooOld, options: aged)
        }
    }

    /// Segments are found as the standard library's split (empty ones kept) finds them, for every arrangement of
    /// dots and letters up to six bytes, and a token without three is counted as that split counts it.
    @Test func segmentsAreFoundAsSplitFindsThem() {
        var texts = [""]
        for _ in 0..<6 { texts += texts.flatMap { [$0 + ".", $0 + "a"] } }
        texts = Array(Set(texts))
        for text in texts {
            let bytes = Array(text.utf8)
            let split = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
            switch JWTVerifier.segments(bytes) {
            case .success(let parts):
                #expect(split.count == 3 && parts.map(Array.init) == split.map(Array.init), "\(text)")
            case .failure(let count): #expect(split.count != 3 && count.segments == split.count, "\(text)")
            }
        }
        #expect(texts.count == 127)
        rejects("", .malformed("expected 3 segments, found 1"))
        rejects("..", .malformed("empty header"))
    }

    @Test func structuralRejections() throws {
        let good = try signer.sign(claims: claims())
        let parts = good.split(separator: ".").map(String.init)
        rejects(parts[0] + "." + parts[1], .malformed("expected 3 segments, found 2"))
        rejects(good + ".x", .malformed("expected 3 segments, found 4"))
        rejects(parts[0] + "." + parts[1] + ".", .malformed("empty signature"))
        rejects(parts[0] + "=." + parts[1] + "." + parts[2], .malformed("header is not base64url"))
        rejects(parts[0] + "." + parts[1] + "." + parts[2] + "=", .malformed("signature is not base64url"))
        rejects(Base64URL.encode("[1]") + "." + parts[1] + "." + parts[2], .invalidHeader("not a JSON object"))
        rejects(String(repeating: "a", count: 16 * 1024 + 1), .tooLarge(16 * 1024 + 1))
        // Payload that is not JSON, correctly signed.
        let input = parts[0] + "." + Base64URL.encode("not json")
        let signed = input + "." + Base64URL.encode(try key.sign(Array(input.utf8)))
        rejects(signed, .invalidPayload("not a JSON object"))
        // Tampered payload under the original signature.
        let tampered =
            parts[0] + "." + Base64URL.encode(JSONValue.object(claims(["sub": "admin"])).serializedBytes) + "."
            + parts[2]
        rejects(tampered, .invalidSignature)
    }

    @Test func derSignaturesAreNeverAccepted() throws {
        let input =
            Base64URL.encode(JSONValue.object(["alg": "ES256", "kid": .string(signer.kid)]).serializedBytes) + "."
            + Base64URL.encode(JSONValue.object(claims()).serializedBytes)
        let raw = try key.sign(Array(input.utf8))
        let der = try #require(ECDSASignature.derFromRaw(raw))
        rejects(input + "." + Base64URL.encode(der), .invalidSignature)
        rejects(input + "." + Base64URL.encode([UInt8](repeating: 0, count: 64)), .invalidSignature)
    }

    @Test func kidIsRequiredWhenSeveralKeysAreKnown() throws {
        var keys = verifier.keys
        try keys.add(try AsymmetricKey.generate(.ed25519))
        var two = verifier
        two.keys = keys
        let noKid = try token(header: ["alg": "ES256"], claims: claims())
        #expect(throws: JWTError.missingKeyID) { try two.verify(noKid, now: now) }
        #expect(throws: Never.self) { try verifier.verify(noKid, now: now) }
    }

    @Test("every algorithm signs and verifies through the JWT layer", arguments: KeyTests.kinds)
    func allAlgorithms(kind: KeyKind) throws {
        let key = try AsymmetricKey.generate(kind)
        let signer = try JWTSigner(key: key)
        var keys = JWTKeySet()
        try keys.add(key)
        let verified = try JWTVerifier(keys: keys).verify(try signer.sign(claims: claims()), now: now)
        #expect(verified.algorithm == kind.algorithm && verified.header["typ"] == "JWT")
    }

    @Test(
        "the headers a signer keeps written are the ones it would write: every type, every algorithm",
        arguments: KeyTests.kinds)
    func keptHeadersAreTheWrittenOnes(kind: KeyKind) throws {
        let key = try AsymmetricKey.generate(kind)
        let signer = try JWTSigner(key: key, kid: "key-1")
        var keys = JWTKeySet()
        try keys.add(key, kid: "key-1")
        for type in ["JWT", "at+jwt", "logout+jwt"] {
            let token = try signer.sign(claims: claims(), type: type)
            let header = String(token.prefix { $0 != "." })
            let expected: JSONValue = .object([
                "alg": .string(kind.algorithm.rawValue), "kid": "key-1", "typ": .string(type),
            ])
            #expect(header == Base64URL.encode(expected.serializedBytes), "\(type)")
            // The payload is the claims as written, and the whole token verifies.
            let parts = token.split(separator: ".", omittingEmptySubsequences: false)
            #expect(
                parts.count == 3 && String(parts[1]) == Base64URL.encode(JSONValue.object(claims()).serializedBytes))
            var options = JWTVerifier.Options(issuer: "https://issuer.test", audience: "broker")
            options.expectedType = type
            let verified = try JWTVerifier(keys: keys, options: options).verify(token, now: now)
            #expect(verified.header["typ"]?.stringValue == type && verified.subject == "user-1")
        }
    }
}
