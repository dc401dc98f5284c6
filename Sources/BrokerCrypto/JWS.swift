package import BrokerCore

/// JWS compact serialization (RFC 7515 §7.1) over the broker's three algorithms.
package enum JWS {
    /// Signs `payload` with `key`; the header gets `alg` from the key, plus `kid` and `typ` when given.
    ///
    /// - Parameters:
    ///   - extraHeader: further header members; `alg` in it is ignored: the key decides.
    package static func sign(
        payload: [UInt8], key: AsymmetricKey, kid: String?, type: String? = "JWT",
        extraHeader: [String: JSONValue] = [:]
    ) throws -> String {
        var header = extraHeader
        header["alg"] = .string(key.algorithm.rawValue)
        if let kid { header["kid"] = .string(kid) }
        if let type { header["typ"] = .string(type) }
        let signingInput = Base64URL.encode(JSONValue.object(header).serializedBytes) + "." + Base64URL.encode(payload)
        let signature = try key.sign(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }
}

/// Signs JWTs with one private key under its thumbprint `kid`.
package struct JWTSigner: Sendable {
    package let key: AsymmetricKey
    package let kid: String

    package init(key: AsymmetricKey, kid: String? = nil) throws {
        guard key.isPrivate else { throw CryptoError.invalidKey("signing needs a private key") }
        self.key = key
        self.kid = try kid ?? key.thumbprint()
    }

    /// Signs a claim set; `type` becomes the `typ` header (`JWT`, or `at+jwt` for access tokens).
    package func sign(claims: [String: JSONValue], type: String = "JWT") throws -> String {
        try JWS.sign(payload: JSONValue.object(claims).serializedBytes, key: key, kid: kid, type: type)
    }
}
