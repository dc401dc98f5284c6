import BrokerCore
import BrokerCrypto

/// A small JSON object sealed under a broker key (AES-256-GCM) for a purpose — the associated data, so that a
/// document sealed for one purpose never opens as another — and carried as base64url through a page, a URL or a
/// cookie. What link tickets, authorization requests, device approvals and passkey ceremonies are made of.
enum SealedDocument {
    static func seal(_ fields: [String: JSONValue], key: [UInt8], purpose: [UInt8]) throws -> String {
        Base64URL.encode(try AESGCM.seal(JSONValue.object(fields).serializedBytes, key: key, associatedData: purpose))
    }

    /// The fields; `nil` when `sealed` is longer than `maxLength`, not base64url, tampered with, sealed by
    /// another key or for another purpose, or not a JSON object.
    static func open(_ sealed: String, key: [UInt8], purpose: [UInt8], maxLength: Int) -> [String: JSONValue]? {
        guard sealed.utf8.count <= maxLength, let box = Base64URL.decode(sealed),
            let opened = AESGCM.open(box, key: key, associatedData: purpose)
        else { return nil }
        return JSONValue.parse(opened)?.objectValue
    }
}
