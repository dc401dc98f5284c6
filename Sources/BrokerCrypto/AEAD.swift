internal import COpenSSL

/// AES-256-GCM (NIST SP 800-38D) through OpenSSL's EVP interface: sealed boxes of the form
/// `nonce (12 bytes) ‖ ciphertext ‖ tag (16 bytes)`, with a fresh random nonce per seal.
///
/// The broker seals state it hands to browsers (the pending sign-in inside the provider's `state`), so that
/// unauthenticated requests cannot make it store anything.
package enum AESGCM {
    package static let keySize = 32
    package static let nonceSize = 12
    package static let tagSize = 16

    /// Encrypts and authenticates `plaintext` and `associatedData` under `key` (32 bytes).
    package static func seal(_ plaintext: [UInt8], key: [UInt8], associatedData: [UInt8] = []) throws -> [UInt8] {
        try seal(plaintext, key: key, nonce: SecureRandom.bytes(nonceSize), associatedData: associatedData)
    }

    /// With a given nonce: for known-answer tests only (a nonce must never repeat under one key).
    package static func seal(_ plaintext: [UInt8], key: [UInt8], nonce: [UInt8], associatedData: [UInt8]) throws
        -> [UInt8]
    {
        guard key.count == keySize, nonce.count == nonceSize else {
            throw CryptoError.invalidParameters("AES-256-GCM needs a 32-byte key and a 12-byte nonce")
        }
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoError.openSSL("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(context) }
        guard EVP_EncryptInit_ex2(context, EVP_aes_256_gcm(), key, nonce, nil) == 1 else {
            throw CryptoError.openSSL("AES-GCM init")
        }
        var length: Int32 = 0
        if !associatedData.isEmpty {
            guard EVP_EncryptUpdate(context, nil, &length, associatedData, Int32(associatedData.count)) == 1 else {
                throw CryptoError.openSSL("AES-GCM associated data")
            }
        }
        var out = [UInt8](repeating: 0, count: plaintext.count + 16)
        var written: Int32 = 0
        if !plaintext.isEmpty {
            guard EVP_EncryptUpdate(context, &out, &written, plaintext, Int32(plaintext.count)) == 1 else {
                throw CryptoError.openSSL("AES-GCM encrypt")
            }
        }
        var final: Int32 = 0
        let finished = out.withUnsafeMutableBufferPointer { buffer in
            EVP_EncryptFinal_ex(context, buffer.baseAddress.map { $0 + Int(written) }, &final)
        }
        guard finished == 1 else { throw CryptoError.openSSL("AES-GCM final") }
        var tag = [UInt8](repeating: 0, count: tagSize)
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(tagSize), &tag) == 1 else {
            throw CryptoError.openSSL("AES-GCM tag")
        }
        return nonce + out.prefix(Int(written + final)) + tag
    }

    /// Decrypts a sealed box; `nil` when it was not sealed under `key` with this associated data, or was
    /// changed in any way.
    package static func open(_ box: [UInt8], key: [UInt8], associatedData: [UInt8] = []) -> [UInt8]? {
        guard key.count == keySize, box.count >= nonceSize + tagSize else { return nil }
        let nonce = Array(box.prefix(nonceSize))
        let ciphertext = Array(box[nonceSize..<(box.count - tagSize)])
        var tag = Array(box.suffix(tagSize))
        guard let context = EVP_CIPHER_CTX_new() else { return nil }
        defer { EVP_CIPHER_CTX_free(context) }
        guard EVP_DecryptInit_ex2(context, EVP_aes_256_gcm(), key, nonce, nil) == 1 else { return nil }
        var length: Int32 = 0
        if !associatedData.isEmpty {
            guard EVP_DecryptUpdate(context, nil, &length, associatedData, Int32(associatedData.count)) == 1 else {
                return nil
            }
        }
        var out = [UInt8](repeating: 0, count: ciphertext.count + 16)
        var written: Int32 = 0
        if !ciphertext.isEmpty {
            guard EVP_DecryptUpdate(context, &out, &written, ciphertext, Int32(ciphertext.count)) == 1 else {
                return nil
            }
        }
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(tagSize), &tag) == 1 else { return nil }
        var final: Int32 = 0
        let verified = out.withUnsafeMutableBufferPointer { buffer in
            EVP_DecryptFinal_ex(context, buffer.baseAddress.map { $0 + Int(written) }, &final)
        }
        // The tag check happens here; on failure nothing decrypted is returned.
        guard verified == 1 else {
            ERR_clear_error()
            return nil
        }
        return Array(out.prefix(Int(written + final)))
    }
}
