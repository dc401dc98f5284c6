package import BrokerCore
package import BrokerCrypto
import Synchronization

/// A WebAuthn authenticator in software, for tests: it makes a credential, and answers registrations and
/// sign-ins the way a platform authenticator does (CTAP2 authenticator data, `none` or `packed` self
/// attestation, DER ECDSA signatures), with knobs to make each thing a relying party must refuse.
package final class SoftAuthenticator: Sendable {
    package let algorithm: COSEKey.Algorithm
    package let key: AsymmetricKey
    package let credentialID: [UInt8]
    package let aaguid: [UInt8]
    /// `nil`: a synced passkey, whose counter is always 0; else the counter before the next signature.
    private let counter: Mutex<UInt32?>
    private let handle = Mutex<[UInt8]?>(nil)

    package init(algorithm: COSEKey.Algorithm = .es256, counter: UInt32? = nil) throws {
        self.algorithm = algorithm
        switch algorithm {
        case .es256: key = try AsymmetricKey.generate(.ecP256)
        case .edDSA: key = try AsymmetricKey.generate(.ed25519)
        case .rs256: key = try AsymmetricKey.generate(.rsa(bits: 2048))
        }
        credentialID = try SecureRandom.bytes(32)
        aaguid = [UInt8](repeating: 0, count: 16)
        self.counter = Mutex(counter)
    }

    /// The user handle the credential was made for (what a discoverable sign-in returns).
    package var userHandle: [UInt8]? { handle.withLock { $0 } }

    /// What a ceremony sends back: base64url fields as the browser's `PublicKeyCredential.toJSON()` has them.
    package struct Response: Sendable {
        package var clientDataJSON: [UInt8]
        package var attestationObject: [UInt8]?
        package var authenticatorData: [UInt8]?
        package var signature: [UInt8]?
        package var userHandle: [UInt8]?
        package var credentialID: [UInt8]

        /// The credential as the broker's pages post it.
        package var json: JSONValue {
            var response: [String: JSONValue] = ["clientDataJSON": .string(Base64URL.encode(clientDataJSON))]
            if let attestationObject { response["attestationObject"] = .string(Base64URL.encode(attestationObject)) }
            if let authenticatorData { response["authenticatorData"] = .string(Base64URL.encode(authenticatorData)) }
            if let signature { response["signature"] = .string(Base64URL.encode(signature)) }
            if let userHandle { response["userHandle"] = .string(Base64URL.encode(userHandle)) }
            let id = JSONValue.string(Base64URL.encode(credentialID))
            return [
                "id": id, "rawId": id, "type": "public-key", "response": .object(response),
                "clientExtensionResults": [:],
            ]
        }
    }

    /// Knobs for a ceremony: each one makes something a relying party must refuse.
    package struct Ceremony: Sendable {
        package var origin: String
        package var rpID: String
        package var userPresent = true
        package var userVerified = true
        package var type: String?
        package var crossOrigin = false
        /// Flip a bit of the signature.
        package var corruptSignature = false
        /// The counter to report instead of the next one.
        package var counter: UInt32?

        package init(origin: String, rpID: String) {
            self.origin = origin
            self.rpID = rpID
        }
    }

    private func clientData(_ type: String, challenge: [UInt8], _ ceremony: Ceremony) -> [UInt8] {
        var fields: [String: JSONValue] = [
            "type": .string(ceremony.type ?? type), "challenge": .string(Base64URL.encode(challenge)),
            "origin": .string(ceremony.origin),
        ]
        if ceremony.crossOrigin { fields["crossOrigin"] = true }
        return JSONValue.object(fields).serializedBytes
    }

    private func nextCounter(_ ceremony: Ceremony) -> UInt32 {
        if let forced = ceremony.counter { return forced }
        return counter.withLock { value in
            guard let current = value else { return 0 }
            value = current + 1
            return current + 1
        }
    }

    private func flags(_ ceremony: Ceremony, attested: Bool) -> UInt8 {
        var flags: UInt8 = 0
        if ceremony.userPresent { flags |= 0x01 }
        if ceremony.userVerified { flags |= 0x04 }
        if attested { flags |= 0x40 }
        return flags
    }

    private static func bigEndian(_ value: UInt32) -> [UInt8] {
        (0..<4).reversed().map { UInt8((value >> ($0 * 8)) & 0xFF) }
    }

    /// `navigator.credentials.create()`: a registration for `userHandle` with `challenge`.
    package func register(
        challenge: [UInt8], userHandle: [UInt8], _ ceremony: Ceremony, format: String = "none"
    ) throws -> Response {
        handle.withLock { $0 = userHandle }
        let clientDataJSON = clientData("webauthn.create", challenge: challenge, ceremony)
        let data =
            Digest.sha256(Array(ceremony.rpID.utf8)) + [flags(ceremony, attested: true)]
            + Self.bigEndian(nextCounter(ceremony)) + aaguid
            + [UInt8(credentialID.count >> 8), UInt8(credentialID.count & 0xFF)] + credentialID
            + (try key.coseKey(algorithm)).encoded
        var statement: CBOR = .map([])
        if format == "packed" {
            var signature = try key.webAuthnSignature(data + Digest.sha256(clientDataJSON))
            if ceremony.corruptSignature { signature[signature.count / 2] ^= 0x01 }
            statement = .map([.init(.text("alg"), .int(algorithm.rawValue)), .init(.text("sig"), .bytes(signature))])
        }
        let object: CBOR = .map([
            .init(.text("fmt"), .text(format)), .init(.text("attStmt"), statement),
            .init(.text("authData"), .bytes(data)),
        ])
        return Response(
            clientDataJSON: clientDataJSON, attestationObject: object.encoded, credentialID: credentialID)
    }

    /// `navigator.credentials.get()`: a signed assertion for `challenge`.
    package func assert(challenge: [UInt8], _ ceremony: Ceremony) throws -> Response {
        let clientDataJSON = clientData("webauthn.get", challenge: challenge, ceremony)
        let data =
            Digest.sha256(Array(ceremony.rpID.utf8)) + [flags(ceremony, attested: false)]
            + Self.bigEndian(nextCounter(ceremony))
        var signature = try key.webAuthnSignature(data + Digest.sha256(clientDataJSON))
        if ceremony.corruptSignature { signature[signature.count / 2] ^= 0x01 }
        return Response(
            clientDataJSON: clientDataJSON, authenticatorData: data, signature: signature, userHandle: userHandle,
            credentialID: credentialID)
    }
}
