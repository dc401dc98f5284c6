import BrokerCore

/// A DPoP proof (RFC 9449 §4.2): what a client sends in the `DPoP` header, signed by the key its tokens are
/// bound to. Made by the broker CLI for its own requests (and by tests standing in for other clients).
package enum DPoPProof {
    /// A proof for `method url` at `now`; `accessToken` adds `ath` (a request carrying a bound token), `nonce` the
    /// server's `DPoP-Nonce`.
    package static func make(
        key: AsymmetricKey, method: String, url: String, accessToken: String? = nil, nonce: String? = nil,
        now: Int64
    ) throws -> String {
        let publicJWK = try key.publicKey().jwk()
        var members: [String: JSONValue] = ["kty": .string(publicJWK.kty)]
        for (name, value) in [
            ("crv", publicJWK.crv), ("x", publicJWK.x), ("y", publicJWK.y), ("n", publicJWK.n), ("e", publicJWK.e),
        ] {
            if let value { members[name] = .string(value) }
        }
        var claims: [String: JSONValue] = [
            "jti": .string(try SecureRandom.token(byteCount: 16)), "htm": .string(method),
            "htu": .string(withoutQuery(url)), "iat": .int(now),
        ]
        if let accessToken { claims["ath"] = .string(Base64URL.encode(Digest.sha256(accessToken))) }
        if let nonce { claims["nonce"] = .string(nonce) }
        return try JWS.sign(
            payload: JSONValue.object(claims).serializedBytes, key: key, kid: nil, type: "dpop+jwt",
            extraHeader: ["jwk": .object(members)])
    }

    /// `htu` has no query or fragment (§4.2).
    static func withoutQuery(_ url: String) -> String {
        String(url.prefix { $0 != "?" && $0 != "#" })
    }
}
