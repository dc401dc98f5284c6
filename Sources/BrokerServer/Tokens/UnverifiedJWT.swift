import BrokerCore
import BrokerCrypto

/// A compact JWT read without checking its signature: only to learn whose keys to check it with (its `kid`, its
/// `iss`), or, for an unsigned request object, what it says. A part that does not parse is `nil`: the verifier
/// that follows says why.
struct UnverifiedJWT {
    let header: [String: JSONValue]?
    let claims: [String: JSONValue]?
    /// Whether the signature segment is empty (`alg: none`).
    let unsigned: Bool

    /// `nil` unless `token` has three segments.
    init?(_ token: String) {
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        header = Base64URL.decode(parts[0]).flatMap { JSONValue.parse($0)?.objectValue }
        claims = Base64URL.decode(parts[1]).flatMap { JSONValue.parse($0)?.objectValue }
        unsigned = parts[2].isEmpty
    }
}
