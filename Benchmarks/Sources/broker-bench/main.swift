import BrokerCore
import BrokerCrypto
import Glibc

/// Measures JWS signature operations per second on one core, for comparison with `openssl speed`, and the
/// per-request work around them that issue 35 made cheaper (a token's claims written as JSON, a mint's form
/// body decoded), so that a change to either is measured on its own, on one core, without HTTP's noise.
///
/// Usage: broker-bench [seconds-per-measurement]   (prints one TSV line per measurement)
let seconds = Double(CommandLine.arguments.dropFirst().first ?? "") ?? 3

func measure(_ body: () throws -> Void) rethrows -> Double {
    // Warm up, then count whole iterations until the time is up.
    for _ in 0..<50 { try body() }
    let clock = ContinuousClock()
    let start = clock.now
    let limit = Duration.milliseconds(Int(seconds * 1000))
    var count = 0
    var elapsed = Duration.zero
    while elapsed < limit {
        for _ in 0..<20 { try body() }
        count += 20
        elapsed = clock.now - start
    }
    let (whole, atto) = elapsed.components
    return Double(count) / (Double(whole) + Double(atto) / 1e18)
}

let now: Int64 = 1_800_000_000
let claims: [String: JSONValue] = [
    "iss": "http://127.0.0.1:8787", "sub": "custom:7d1c3f4e-9f53-4d55-8f43-0c6c1a3b7e21", "aud": "broker",
    "iat": .int(now), "nbf": .int(now), "exp": .int(now + 3600), "jti": "6nJ3dF1xq0v5Yt2kP9sLhA", "idp": "custom",
    "client_id": "broker-cli",
]

print("measurement\tops_per_second")
let claimsObject = JSONValue.object(claims)
let serialize = measure { precondition(!claimsObject.serializedBytes.isEmpty) }
print("claims_json_serialize\t\(Int(serialize))")
let form = Array("grant_type=client_credentials&scope=deploy+read&audience=https%3A%2F%2Fapi.example.com".utf8)
let decode = measure { precondition(FormEncoding.decode(String(decoding: form, as: UTF8.self))?.count == 3) }
print("form_decode\t\(Int(decode))")
fflush(nil)
for kind in [KeyKind.ecP256, .rsa(bits: 2048), .ed25519] {
    let key = try AsymmetricKey.generate(kind)
    let signer = try JWTSigner(key: key)
    let token = try signer.sign(claims: claims, type: "at+jwt")
    let dot = token.lastIndex(of: ".")!
    let message = Array(token[..<dot].utf8)
    let signature = Base64URL.decode(token[token.index(after: dot)...])!
    let publicKey = try key.publicKey()
    var keys = JWTKeySet()
    try keys.add(key)
    let verifier = JWTVerifier(keys: keys, options: .init(issuer: "http://127.0.0.1:8787", audience: "broker"))
    let alg = kind.algorithm.rawValue

    let sign = try measure { _ = try key.sign(message) }
    print("\(alg)_sign\t\(Int(sign))")
    let verify = measure { precondition(publicKey.verify(signature: signature, message: message)) }
    print("\(alg)_verify\t\(Int(verify))")
    let jwtSign = try measure { _ = try signer.sign(claims: claims, type: "at+jwt") }
    print("\(alg)_jwt_sign\t\(Int(jwtSign))")
    let jwtVerify = try measure { _ = try verifier.verify(token, now: now) }
    print("\(alg)_jwt_verify\t\(Int(jwtVerify))")
    fflush(nil)
}
