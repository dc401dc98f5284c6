package import BrokerCore

/// HTTP Basic client credentials as OAuth uses them (RFC 6749 §2.3.1): the id and the secret are each
/// form-urlencoded, joined by `:`, and base64-encoded (RFC 7617).
package enum HTTPBasic {
    /// The `Authorization` header field for `id` and `secret`.
    package static func header(id: String, secret: Secret) -> (name: String, value: String) {
        let pair = FormEncoding.percentEncode(id) + ":" + FormEncoding.percentEncode(secret.exposed)
        return (name: "Authorization", value: "Basic " + Base64URL.encodeStandard(Array(pair.utf8)))
    }

    /// The id and secret in the token part of a Basic header (what follows `Basic `); `nil` when it is not
    /// base64 of UTF-8 text with a `:` and valid percent-escapes on both sides.
    package static func credentials(fromToken token: String) -> (id: String, secret: String)? {
        // The text must be UTF-8 as a whole (an escape may not complete a broken sequence); the `:` is then
        // found among the bytes, where it cannot be part of a longer character.
        guard let decoded = Base64URL.decodeStandard(token), UTF8Text.validated(decoded) != nil,
            let colon = decoded.firstIndex(of: UInt8(ascii: ":"))
        else { return nil }
        return decoded.withUnsafeBufferPointer { bytes in
            guard let id = FormEncoding.percentDecode(bytes: UnsafeBufferPointer(rebasing: bytes[..<colon])),
                let secret = FormEncoding.percentDecode(bytes: UnsafeBufferPointer(rebasing: bytes[(colon + 1)...]))
            else { return nil }
            return (id, secret)
        }
    }
}
