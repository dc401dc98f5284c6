import BrokerCore
import BrokerCrypto
import FuzzSupport

/// JWK Set parsing and key import (providers' JWKS, CI issuers' JWKS, the broker's own key files).
/// Properties: a key that imports exports to a JWK that imports again as the same key (same RFC 7638
/// thumbprint, same private-ness), and a set builds a verifier key set without crashing.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJWK(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let set = try? JWKSet.parse(fuzzInput(data, size)) else { return 0 }
    for jwk in set.keys {
        _ = try? jwk.thumbprint()
        guard let key = try? AsymmetricKey(jwk: jwk) else { continue }
        do {
            let exported = try key.jwk(includePrivate: key.isPrivate)
            let again = try AsymmetricKey(jwk: exported)
            let thumbprints = (key: try key.thumbprint(), again: try again.thumbprint(), jwk: try jwk.thumbprint())
            require(thumbprints.again == thumbprints.key, "a re-imported key has another thumbprint")
            require(again.isPrivate == key.isPrivate, "a re-imported key changed private-ness")
            require(thumbprints.jwk == thumbprints.key, "the JWK's thumbprint is not its key's")
        } catch {
            require(false, "an imported key does not survive export and import: \(error)")
        }
    }
    _ = try? JWTKeySet(jwks: set)
    return 0
}
