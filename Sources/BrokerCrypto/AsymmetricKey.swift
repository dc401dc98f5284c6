internal import COpenSSL
import Synchronization

/// An EC P-256, RSA (≥ 2048 bits) or Ed25519 key held by OpenSSL, public or private.
///
/// The key is immutable once made, so one instance may sign or verify from many tasks at once: every
/// operation makes its own OpenSSL context.
package final class AsymmetricKey: @unchecked Sendable {
    /// Smallest RSA modulus accepted, for signing and verifying alike.
    package static let minimumRSABits = 2048

    let pkey: OpaquePointer
    package let kind: KeyKind
    package let isPrivate: Bool
    /// Initialised contexts, reused across operations (see `AsymmetricKey+Signing.swift`): EVP_PKEY_CTXs, or
    /// EVP_MD_CTXs for Ed25519.
    let signContexts: ContextPool
    let verifyContexts: ContextPool

    /// The one algorithm this key signs and verifies with.
    package var algorithm: JWSAlgorithm { kind.algorithm }

    /// Takes ownership of `pkey` after checking that it is a key kind we accept.
    init(taking pkey: OpaquePointer, isPrivate: Bool) throws {
        do {
            self.kind = try AsymmetricKey.classify(pkey)
        } catch {
            EVP_PKEY_free(pkey)
            throw error
        }
        self.pkey = pkey
        self.isPrivate = isPrivate
        // Ed25519 goes through EVP_DigestSign, so its pools keep EVP_MD_CTXs.
        let free: @Sendable (OpaquePointer) -> Void
        if case .ed25519 = kind {
            free = { EVP_MD_CTX_free($0) }
        } else {
            free = { EVP_PKEY_CTX_free($0) }
        }
        signContexts = ContextPool(free: free)
        verifyContexts = ContextPool(free: free)
    }

    deinit {
        // The pools free their contexts after this; each holds its own reference to the key.
        EVP_PKEY_free(pkey)
    }

    private static func classify(_ pkey: OpaquePointer) throws -> KeyKind {
        if EVP_PKEY_is_a(pkey, "EC") == 1 {
            var name = [CChar](repeating: 0, count: 64)
            var length = 0
            guard EVP_PKEY_get_group_name(pkey, &name, name.count, &length) == 1 else {
                throw CryptoError.unsupportedKey("EC key without a named curve")
            }
            let curve = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            guard curve == "prime256v1" || curve == "P-256" else {
                throw CryptoError.unsupportedKey("EC curve \(curve) is not supported (only P-256)")
            }
            return .ecP256
        }
        if EVP_PKEY_is_a(pkey, "RSA") == 1 {
            let bits = Int(EVP_PKEY_get_bits(pkey))
            guard bits >= minimumRSABits else {
                throw CryptoError.weakKey("RSA key of \(bits) bits is too small (at least \(minimumRSABits) required)")
            }
            return .rsa(bits: bits)
        }
        if EVP_PKEY_is_a(pkey, "ED25519") == 1 {
            return .ed25519
        }
        throw CryptoError.unsupportedKey("unsupported key type (EC P-256, RSA or Ed25519 expected)")
    }

    // MARK: Generation

    /// Generates a new private key; `rsaBits` applies to RSA only.
    package static func generate(_ kind: KeyKind) throws -> AsymmetricKey {
        let name: String
        switch kind {
        case .ecP256: name = "EC"
        case .rsa: name = "RSA"
        case .ed25519: name = "ED25519"
        }
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, name, nil) else { throw CryptoError.openSSL("key generation") }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_keygen_init(ctx) == 1 else { throw CryptoError.openSSL("key generation") }
        switch kind {
        case .ecP256:
            guard EVP_PKEY_CTX_set_group_name(ctx, "P-256") == 1 else { throw CryptoError.openSSL("key generation") }
        case .rsa(let bits):
            guard bits >= minimumRSABits else { throw CryptoError.weakKey("RSA keys must have at least 2048 bits") }
            guard EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, Int32(bits)) == 1 else {
                throw CryptoError.openSSL("key generation")
            }
        case .ed25519:
            break
        }
        var pkey: OpaquePointer?
        guard EVP_PKEY_generate(ctx, &pkey) == 1, let pkey else { throw CryptoError.openSSL("key generation") }
        return try AsymmetricKey(taking: pkey, isPrivate: true)
    }

    // MARK: PEM and DER

    /// Reads a PEM private key (PKCS#8, SEC 1 or PKCS#1) or, failing that, a PEM public key (SPKI).
    ///
    /// Encrypted private keys are refused rather than prompting for a passphrase.
    package convenience init(pem: String) throws {
        let bytes = Array(pem.utf8)
        if let pkey = AsymmetricKey.readPEM(bytes, privateKey: true) {
            try self.init(taking: pkey, isPrivate: true)
        } else if let pkey = AsymmetricKey.readPEM(bytes, privateKey: false) {
            try self.init(taking: pkey, isPrivate: false)
        } else {
            ERR_clear_error()
            if pem.contains("ENCRYPTED") {
                throw CryptoError.invalidKey("encrypted PEM keys are not supported; decrypt it first")
            }
            throw CryptoError.invalidKey("not a PEM private or public key")
        }
    }

    private static func readPEM(_ bytes: [UInt8], privateKey: Bool) -> OpaquePointer? {
        bytes.withUnsafeBytes { buffer -> OpaquePointer? in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return privateKey ? broker_pem_read_private_key(bio) : broker_pem_read_public_key(bio)
        }
    }

    /// The private key as PKCS#8 PEM (`BEGIN PRIVATE KEY`).
    package func privateKeyPEM() throws -> String {
        guard isPrivate else { throw CryptoError.invalidKey("not a private key") }
        return try writePEM { PEM_write_bio_PrivateKey($0, pkey, nil, nil, 0, nil, nil) }
    }

    /// The public key as SPKI PEM (`BEGIN PUBLIC KEY`).
    package func publicKeyPEM() throws -> String {
        try writePEM { PEM_write_bio_PUBKEY($0, pkey) }
    }

    private func writePEM(_ write: (OpaquePointer) -> Int32) throws -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw CryptoError.openSSL("PEM encoding") }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else { throw CryptoError.openSSL("PEM encoding") }
        var pointer: UnsafeMutablePointer<CChar>?
        let length = broker_bio_mem_data(bio, &pointer)
        guard let pointer, length > 0 else { throw CryptoError.openSSL("PEM encoding") }
        return String(decoding: UnsafeRawBufferPointer(start: pointer, count: length), as: UTF8.self)
    }

    /// The public half of this key (itself when it is already public).
    package func publicKey() throws -> AsymmetricKey {
        guard isPrivate else { return self }
        let length = i2d_PUBKEY(pkey, nil)
        guard length > 0 else { throw CryptoError.openSSL("public key export") }
        var der = [UInt8](repeating: 0, count: Int(length))
        try der.withUnsafeMutableBufferPointer { buffer in
            var out = buffer.baseAddress
            guard i2d_PUBKEY(pkey, &out) == length else { throw CryptoError.openSSL("public key export") }
        }
        let pub: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var input: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PUBKEY(nil, &input, Int(length))
        }
        guard let pub else { throw CryptoError.openSSL("public key import") }
        return try AsymmetricKey(taking: pub, isPrivate: false)
    }
}
