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
        try sign(
            payload: payload, key: key, encodedHeader: encodedHeader(key: key, kid: kid, type: type, extra: extraHeader)
        )
    }

    /// The base64url of the header `sign` writes: `alg` from the key, `kid` and `typ` when given, `extra` beside.
    static func encodedHeader(key: AsymmetricKey, kid: String?, type: String?, extra: [String: JSONValue] = [:])
        -> [UInt8]
    {
        var header = extra
        header["alg"] = .string(key.algorithm.rawValue)
        if let kid { header["kid"] = .string(kid) }
        if let type { header["typ"] = .string(type) }
        return Base64URL.encodedBytes(JSONValue.object(header).serializedBytes)
    }

    /// Signs `payload` under a header already encoded: the token is put together in one buffer, and made a
    /// `String` once.
    static func sign(payload: [UInt8], key: AsymmetricKey, encodedHeader: [UInt8]) throws -> String {
        let encodedPayload = Base64URL.encodedBytes(payload)
        var token = [UInt8]()
        // The signature's encoding: 86 characters for ES256 and Ed25519, 342 for RSA-2048, 683 for RSA-4096.
        token.reserveCapacity(encodedHeader.count + encodedPayload.count + 2 + 700)
        token.append(contentsOf: encodedHeader)
        token.append(UInt8(ascii: "."))
        token.append(contentsOf: encodedPayload)
        let signature = try key.sign(token)
        token.append(UInt8(ascii: "."))
        token.append(contentsOf: Base64URL.encodedBytes(signature))
        return String(decoding: token, as: UTF8.self)
    }
}

/// Signs JWTs with one private key under its thumbprint `kid`.
package struct JWTSigner: Sendable {
    package let key: AsymmetricKey
    package let kid: String
    /// The encoded headers of the two types signed on every request (`JWT` and `at+jwt`), written once: the same
    /// bytes `JWS.sign` would write each time.
    private let commonHeaders: [String: [UInt8]]

    package init(key: AsymmetricKey, kid: String? = nil) throws {
        guard key.isPrivate else { throw CryptoError.invalidKey("signing needs a private key") }
        self.key = key
        let kid = try kid ?? key.thumbprint()
        self.kid = kid
        commonHeaders = Dictionary(
            uniqueKeysWithValues: ["JWT", "at+jwt"].map { ($0, JWS.encodedHeader(key: key, kid: kid, type: $0)) })
    }

    /// Signs a claim set; `type` becomes the `typ` header (`JWT`, or `at+jwt` for access tokens).
    package func sign(claims: [String: JSONValue], type: String = "JWT") throws -> String {
        let header = commonHeaders[type] ?? JWS.encodedHeader(key: key, kid: kid, type: type)
        return try JWS.sign(payload: JSONValue.object(claims).serializedBytes, key: key, encodedHeader: header)
    }
}
