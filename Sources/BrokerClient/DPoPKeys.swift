package import BrokerCore
import BrokerCredentials
package import BrokerCrypto
import BrokerSystem

#if canImport(Glibc)
    import Glibc
#endif

/// The CLI's DPoP keys (issue "Logout everywhere…" item 5): one P-256 key per broker and profile, made at the
/// first sign-in and kept beside the credentials file in its own 0600 file under `$BROKER_HOME/keys/` (0700),
/// written atomically. Every token the broker issues to that profile is bound to the key — the refresh token
/// too — so a copied `credentials.json` is worth nothing without the key file (and, with issue "Keyring",
/// the key moves to the desktop keyring).
package struct DPoPKeyStore: Sendable {
    package let directory: String

    package init(home: String) { directory = home + "/keys" }

    /// The key file of `key` (a digest of broker URL and profile: no name of either on disk).
    package func path(for key: SessionKey) -> String {
        let digest = Digest.sha256(key.brokerURL + "\n" + key.profile)
        return directory + "/dpop-" + Base64URL.encode(Array(digest.prefix(12))) + ".pem"
    }

    /// The profile's key, if one was made.
    package func load(_ key: SessionKey) throws -> AsymmetricKey? {
        let file = path(for: key)
        guard PosixFile.exists(file) else { return nil }
        if let mode = PosixFile.mode(file), mode & 0o077 != 0 {
            throw DPoPKeyError(
                "\(file) is readable by others (mode \(String(mode & 0o777, radix: 8))); "
                    + "chmod 600 it, or delete it and sign in again")
        }
        let bytes = try PosixFile.read(path: file, maxSize: 16 * 1024)
        do {
            return try AsymmetricKey(pem: String(decoding: bytes, as: UTF8.self))
        } catch {
            throw DPoPKeyError("\(file) is not a usable key (\(error)); delete it and sign in again")
        }
    }

    /// The profile's key, made now if there is none.
    package func loadOrCreate(_ key: SessionKey) throws -> AsymmetricKey {
        if let existing = try load(key) { return existing }
        let made = try AsymmetricKey.generate(.ecP256)
        try PosixFile.ensurePrivateDirectory(directory)
        try PosixFile.writeAtomically(Array(try made.privateKeyPEM().utf8), to: path(for: key), mode: 0o600)
        return made
    }

    /// Forgets the profile's key (logout): the next sign-in makes a new one.
    package func remove(_ key: SessionKey) {
        _ = unlink(path(for: key))
    }
}

package struct DPoPKeyError: Error, CustomStringConvertible, Sendable {
    package let description: String
    package init(_ description: String) { self.description = description }
}

/// Whether an access token is DPoP-bound (its `cnf.jkt`): then it goes as `Authorization: DPoP` with a proof.
/// Read without verifying — the token is the client's own, and the server decides anyway.
package func isDPoPBound(_ accessToken: Secret) -> Bool {
    let parts = accessToken.exposed.split(separator: ".")
    guard parts.count == 3, let payload = Base64URL.decode(parts[1]), let claims = JSONValue.parse(payload) else {
        return false
    }
    return claims["cnf"]?["jkt"]?.stringValue != nil
}
