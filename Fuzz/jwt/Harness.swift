import BrokerCore
import BrokerCrypto
import FuzzSupport

/// The JWS/JWT verifier (access tokens at /auth/me, subject tokens of the token exchange, ID tokens).
///
/// The first byte picks the mode:
/// - even: the rest is a compact token, verified against Fuzz/data/keys.jwks (an RS256, an ES256 and an EdDSA
///   key). Property: whatever it accepts is unexpired at `now` and was signed with the algorithm of its key.
/// - odd: the rest is `header JSON` 0x00 `payload JSON`; the harness signs those exact bytes with the key the
///   header's `kid` names (the first key when none) and verifies the token. Properties: the verifier never
///   calls a correct signature wrong when the header's `alg` is the key's; what it accepts carries exactly the
///   claims that were signed.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJWT(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let (mode, rest) = selector(fuzzInput(data, size))
    if mode & 1 == 0 {
        let token = String(decoding: rest, as: UTF8.self)
        if let verified = try? Fixture.shared.verifier.verify(token, now: Fixture.now) {
            require((verified.expiresAt ?? .min) >= Fixture.now - 60, "an expired token was accepted")
            require(Fixture.shared.keys[verified.kid]?.algorithm == verified.algorithm, "algorithm is not the key's")
        }
        _ = try? Fixture.shared.verifier.verifySignature(token)
        return 0
    }
    guard let split = rest.firstIndex(of: 0) else { return 0 }
    let header = Array(rest[..<split])
    let payload = Array(rest[(split + 1)...])
    let headerValue = JSONValue.parse(header)
    let kid = headerValue?["kid"]?.stringValue
    guard let (keyID, key) = Fixture.shared.signingKey(kid) else { return 0 }
    let signingInput = Base64URL.encode(header) + "." + Base64URL.encode(payload)
    guard let signature = try? key.sign(Array(signingInput.utf8)) else {
        require(false, "the fixture key could not sign")
        return 0
    }
    let token = signingInput + "." + Base64URL.encode(signature)
    do {
        let verified = try Fixture.shared.verifier.verify(token, now: Fixture.now)
        require(verified.kid == keyID, "verified with another key than the one that signed")
        require(
            JSONValue.object(verified.claims).serializedBytes == JSONValue.parse(payload)?.serializedBytes,
            "the accepted claims are not the signed ones")
    } catch .invalidSignature {
        let algorithmMatches = headerValue?["alg"]?.stringValue == key.algorithm.rawValue
        require(!algorithmMatches || kid == nil, "a correct \(key.algorithm) signature was called invalid")
    } catch {}
    return 0
}

/// The fixture keys, read once from Fuzz/data/keys.jwks.
struct Fixture: Sendable {
    static let now: Int64 = 1_800_000_000
    static let shared = Fixture()

    /// Private keys by `kid`, in the file's order.
    let ordered: [(String, AsymmetricKey)]
    let keys: [String: AsymmetricKey]
    let verifier: JWTVerifier

    init() {
        do {
            let set = try JWKSet.parse(fuzzData("keys.jwks"))
            var ordered: [(String, AsymmetricKey)] = []
            var keySet = JWTKeySet()
            for jwk in set.keys {
                let key = try AsymmetricKey(jwk: jwk)
                let kid = try jwk.kid ?? key.thumbprint()
                ordered.append((kid, key))
                try keySet.add(key, kid: kid)
            }
            self.ordered = ordered
            keys = Dictionary(uniqueKeysWithValues: ordered)
            verifier = JWTVerifier(keys: keySet)
        } catch {
            fatalError("Fuzz/data/keys.jwks: \(error)")
        }
    }

    func signingKey(_ kid: String?) -> (String, AsymmetricKey)? {
        guard let kid else { return ordered.first }
        return keys[kid].map { (kid, $0) }
    }
}
