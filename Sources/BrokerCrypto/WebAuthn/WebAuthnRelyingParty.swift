import BrokerCore
internal import COpenSSL

/// The checks of a WebAuthn relying party (WebAuthn Level 3 §7.1 registration, §7.2 authentication), pure: the
/// caller brings the challenge it issued (and spends it), the stored key and counter, and stores the outcome.
///
/// - `clientDataJSON`: `type`, the exact challenge, an allowed origin, and no `crossOrigin: true`.
/// - Authenticator data: the SHA-256 of the relying-party id, user presence always, user verification when
///   asked, and at sign-in a signature over `authenticatorData ‖ SHA-256(clientDataJSON)` by the stored key.
/// - Attestation: `none`, or `packed` (self attestation checked with the new key; with a certificate, checked
///   with the certificate's key — the chain is not judged: the broker asks for no attestation and trusts none).
/// - The signature counter: once either side is non-zero, it must go up (a clone would repeat or go back);
///   synced passkeys report 0 every time, which is fine.
package struct WebAuthnRelyingParty: Sendable {
    /// The relying-party id: a registrable domain suffix of the origins' host (never an IP address).
    package let id: String
    /// The origins ceremonies may come from (scheme, host and port, as the browser writes them).
    package let origins: [String]

    package init(id: String, origins: [String]) {
        self.id = id
        self.origins = origins
    }

    package var idHash: [UInt8] { Digest.sha256(Array(id.utf8)) }

    /// What a registration proved: the credential to store.
    package struct Registration: Sendable {
        package var credentialID: [UInt8]
        package var publicKey: COSEKey
        package var signCount: UInt32
        package var flags: AuthenticatorData.Flags
        package var aaguid: [UInt8]
        /// `none` or `packed`.
        package var attestationFormat: String
    }

    /// What a sign-in proved: the counter to store and the flags (user verification, backup state).
    package struct Assertion: Sendable {
        package var signCount: UInt32
        package var flags: AuthenticatorData.Flags
    }

    // MARK: Registration

    package func register(
        clientDataJSON: [UInt8], attestationObject: [UInt8], challenge: [UInt8], requireUserVerification: Bool
    ) throws(WebAuthnError) -> Registration {
        try checkClientData(clientDataJSON, type: "webauthn.create", challenge: challenge)
        let object: CBOR
        do {
            object = try CBORReader.decode(attestationObject)
        } catch {
            throw .malformed("the attestation object is not CBOR: \(error)")
        }
        guard let format = object[text: "fmt"]?.textValue, let statement = object[text: "attStmt"],
            statement.mapValue != nil, let rawData = object[text: "authData"]?.bytesValue
        else { throw .malformed("the attestation object lacks fmt, attStmt or authData") }
        let data = try AuthenticatorData(rawData)
        try checkFlags(data, requireUserVerification: requireUserVerification)
        guard let credential = data.credential else {
            throw .malformed("the registration's authenticator data holds no credential")
        }
        let signed = rawData + Digest.sha256(clientDataJSON)
        switch format {
        case "none":
            guard statement.mapValue?.isEmpty == true else { throw .malformed("attestation none with a statement") }
        case "packed":
            try checkPacked(statement, signed: signed, credentialKey: credential.publicKey)
        default:
            throw .unsupported("attestation format \(format.prefix(32)) (the broker asks for none; packed is checked)")
        }
        return Registration(
            credentialID: credential.id, publicKey: credential.publicKey, signCount: data.signCount,
            flags: data.flags, aaguid: credential.aaguid, attestationFormat: format)
    }

    /// Packed attestation (WebAuthn §8.2): `alg` and `sig`, and with `x5c` the attestation certificate.
    private func checkPacked(_ statement: CBOR, signed: [UInt8], credentialKey: COSEKey) throws(WebAuthnError) {
        guard let alg = statement[text: "alg"]?.intValue,
            let signature = statement[text: "sig"]?.bytesValue
        else { throw .malformed("packed attestation without alg or sig") }
        if let chain = statement[text: "x5c"] {
            guard let certificates = chain.arrayValue, let leaf = certificates.first?.bytesValue else {
                throw .malformed("packed attestation's x5c is not a list of certificates")
            }
            guard let algorithm = COSEKey.Algorithm(rawValue: alg), algorithm != .edDSA else {
                throw .unsupported("packed attestation algorithm \(alg)")
            }
            let key: AsymmetricKey
            do {
                key = try AsymmetricKey(certificateDER: leaf)
            } catch {
                throw .malformed("the attestation certificate cannot be read: \(error)")
            }
            let valid: Bool
            switch algorithm {
            case .es256:
                guard key.kind == .ecP256, let raw = try? ECDSASignature.rawFromDER(signature) else {
                    throw .refused("the packed attestation signature does not verify")
                }
                valid = key.verify(signature: raw, message: signed)
            default:
                guard case .rsa = key.kind else { throw .refused("the packed attestation signature does not verify") }
                valid = key.verify(signature: signature, message: signed)
            }
            guard valid else { throw .refused("the packed attestation signature does not verify") }
        } else {
            // Self attestation: signed by the new credential's own key, with its algorithm.
            guard alg == credentialKey.algorithm.rawValue else {
                throw .refused("self attestation with algorithm \(alg), not the credential's")
            }
            guard credentialKey.verify(signature: signature, message: signed) else {
                throw .refused("the self-attestation signature does not verify")
            }
        }
    }

    // MARK: Authentication

    package func authenticate(
        clientDataJSON: [UInt8], authenticatorData rawData: [UInt8], signature: [UInt8], challenge: [UInt8],
        publicKey: COSEKey, storedSignCount: UInt32, requireUserVerification: Bool
    ) throws(WebAuthnError) -> Assertion {
        try checkClientData(clientDataJSON, type: "webauthn.get", challenge: challenge)
        // The signature first (RT3-9): the authenticator data's optional parts (extension outputs, CBOR) are
        // read only for an assertion the stored key signed.
        guard publicKey.verify(signature: signature, message: rawData + Digest.sha256(clientDataJSON)) else {
            throw .refused("the passkey's signature does not verify")
        }
        let data = try AuthenticatorData(rawData)
        try checkFlags(data, requireUserVerification: requireUserVerification)
        try Self.checkCounter(stored: storedSignCount, presented: data.signCount)
        return Assertion(signCount: data.signCount, flags: data.flags)
    }

    /// Once either counter is non-zero the presented one must be greater than the stored one (WebAuthn
    /// §7.2 step 21): an equal or lower value means a cloned authenticator (or a replayed assertion).
    package static func checkCounter(stored: UInt32, presented: UInt32) throws(WebAuthnError) {
        if stored == 0 && presented == 0 { return }
        guard presented > stored else {
            throw .refused("the passkey's signature counter did not increase (\(presented) after \(stored))")
        }
    }

    // MARK: Shared checks

    private func checkFlags(_ data: AuthenticatorData, requireUserVerification: Bool) throws(WebAuthnError) {
        guard ConstantTime.equals(data.rpIDHash, idHash) else {
            throw .refused("the authenticator signed for another relying party than \(id)")
        }
        guard data.flags.contains(.userPresent) else { throw .refused("the user was not present (UP flag)") }
        if requireUserVerification {
            guard data.flags.contains(.userVerified) else { throw .refused("the user was not verified (UV flag)") }
        }
    }

    private func checkClientData(_ json: [UInt8], type: String, challenge: [UInt8]) throws(WebAuthnError) {
        guard json.count <= 4096, let data = JSONValue.parse(json)?.objectValue else {
            throw .malformed("clientDataJSON is not a JSON object")
        }
        guard data["type"]?.stringValue == type else {
            throw .refused("clientDataJSON type is not \(type)")
        }
        guard let presented = data["challenge"]?.stringValue,
            ConstantTime.equals(Array(presented.utf8), Array(Base64URL.encode(challenge).utf8))
        else { throw .refused("clientDataJSON carries another challenge") }
        guard let origin = data["origin"]?.stringValue, origins.contains(origin) else {
            throw .refused(
                "the ceremony came from another origin (\(data["origin"]?.stringValue?.prefix(80) ?? "none"))")
        }
        if data["crossOrigin"]?.boolValue == true {
            throw .refused("the ceremony ran in a cross-origin frame")
        }
    }
}

extension AsymmetricKey {
    /// The public key of a DER X.509 certificate (an attestation certificate's).
    package convenience init(certificateDER der: [UInt8]) throws {
        let certificate: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var input: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_X509(nil, &input, buffer.count)
        }
        guard let certificate else { throw CryptoError.invalidKey("not a DER X.509 certificate") }
        defer { X509_free(certificate) }
        guard let pkey = X509_get_pubkey(certificate) else { throw CryptoError.invalidKey("no public key") }
        try self.init(taking: pkey, isPrivate: false)
    }
}
