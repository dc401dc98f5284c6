/// Why a WebAuthn ceremony's data was refused.
package enum WebAuthnError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Bytes that cannot be read as what they should be.
    case malformed(String)
    /// Well-formed, but something this relying party does not accept (an algorithm, a curve, a format).
    case unsupported(String)
    /// Read fine, and wrong: another challenge, origin or relying party, a missing flag, a bad signature.
    case refused(String)

    package var description: String {
        switch self {
        case .malformed(let reason), .unsupported(let reason), .refused(let reason): reason
        }
    }
}

/// The authenticator data of a WebAuthn ceremony (WebAuthn Level 3 §6.1): the relying party id's hash, the
/// flags, the signature counter, and at registration the new credential (AAGUID, id, COSE public key).
package struct AuthenticatorData: Sendable {
    package struct Flags: OptionSet, Sendable {
        package let rawValue: UInt8
        package init(rawValue: UInt8) { self.rawValue = rawValue }
        /// User present (a touch, a click).
        package static let userPresent = Flags(rawValue: 0x01)
        /// User verified (PIN, biometrics).
        package static let userVerified = Flags(rawValue: 0x04)
        /// The credential may be backed up (a synced passkey).
        package static let backupEligible = Flags(rawValue: 0x08)
        /// The credential is backed up now.
        package static let backedUp = Flags(rawValue: 0x10)
        /// Attested credential data follows.
        package static let attestedCredentialData = Flags(rawValue: 0x40)
        /// Extension outputs follow.
        package static let extensionData = Flags(rawValue: 0x80)
    }

    /// A new credential, present at registration.
    package struct AttestedCredential: Sendable {
        package var aaguid: [UInt8]
        package var id: [UInt8]
        package var publicKey: COSEKey
    }

    /// The longest credential id WebAuthn allows.
    package static let maxCredentialIDLength = 1023

    package let rpIDHash: [UInt8]
    package let flags: Flags
    package let signCount: UInt32
    package let credential: AttestedCredential?
    package let extensions: CBOR?

    /// Reads authenticator data; every byte must belong to a part the flags announce.
    package init(_ bytes: [UInt8]) throws(WebAuthnError) {
        guard bytes.count >= 37 else { throw .malformed("authenticator data is \(bytes.count) bytes, under 37") }
        rpIDHash = Array(bytes[0..<32])
        flags = Flags(rawValue: bytes[32])
        signCount = bytes[33..<37].reduce(0) { $0 << 8 | UInt32($1) }
        var offset = 37
        if flags.contains(.attestedCredentialData) {
            guard bytes.count >= offset + 18 else { throw .malformed("attested credential data ends early") }
            let aaguid = Array(bytes[offset..<offset + 16])
            let length = Int(bytes[offset + 16]) << 8 | Int(bytes[offset + 17])
            offset += 18
            guard length >= 1, length <= Self.maxCredentialIDLength else {
                throw .malformed("a credential id of \(length) bytes (1 to 1023 allowed)")
            }
            guard bytes.count >= offset + length else { throw .malformed("the credential id ends early") }
            let id = Array(bytes[offset..<offset + length])
            offset += length
            var reader = CBORReader(bytes, offset: offset)
            let item: CBOR
            do {
                item = try reader.read()
            } catch {
                throw .malformed("the credential public key is not CBOR: \(error)")
            }
            let key = try COSEKey(item, encoded: Array(bytes[offset..<reader.offset]))
            offset = reader.offset
            credential = AttestedCredential(aaguid: aaguid, id: id, publicKey: key)
        } else {
            credential = nil
        }
        if flags.contains(.extensionData) {
            var reader = CBORReader(bytes, offset: offset)
            do {
                let item = try reader.read()
                guard item.mapValue != nil else { throw CBORError("not a map") }
                extensions = item
            } catch {
                throw .malformed("the extension outputs are not a CBOR map: \(error)")
            }
            offset = reader.offset
        } else {
            extensions = nil
        }
        guard offset == bytes.count else {
            throw .malformed("\(bytes.count - offset) bytes after the authenticator data's announced parts")
        }
        // A backed-up credential is backup eligible (WebAuthn §6.1.3): BS without BE is not a real authenticator.
        guard !flags.contains(.backedUp) || flags.contains(.backupEligible) else {
            throw .malformed("the backed-up flag without the backup-eligible flag")
        }
    }
}
