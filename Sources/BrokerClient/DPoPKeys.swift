package import BrokerCore
import BrokerCredentials
package import BrokerCrypto
import BrokerKeyring
import BrokerSystem
import Glibc
import Synchronization

/// The CLI's DPoP keys (issue "Logout everywhere…" item 5): one P-256 key per broker and profile, made at the
/// first sign-in and kept beside the credentials file in its own 0600 file under `$BROKER_HOME/keys/` (0700),
/// written atomically — or, when the profile's session keeps its secrets in the desktop keyring (issue
/// "Keyring"), in the keyring, moved there by ``VaultTokenCache`` when the session is saved. Every token the
/// broker issues to that profile is bound to the key — the refresh token too — so a copied `credentials.json`
/// is worth nothing without it.
package struct DPoPKeyStore: Sendable {
    package let directory: String
    /// The client's home (`$BROKER_HOME`), checked before the key's folder is made in it.
    package let home: String
    /// The keyring, when the profile's `credential_store` is not `file`.
    let vault: KeyringVault?
    /// `credential_store` is `keyring`: a keyring that cannot be read is an error, never "no key".
    let strict: Bool

    package init(home: String, vault: KeyringVault? = nil, strict: Bool = false) {
        directory = home + "/keys"
        self.home = home
        self.vault = vault
        self.strict = strict
    }

    /// The key file of `key` (a digest of broker URL and profile: no name of either on disk).
    package func path(for key: SessionKey) -> String {
        let digest = Digest.sha256(key.brokerURL + "\n" + key.profile)
        return directory + "/dpop-" + Base64URL.encode(Array(digest.prefix(12))) + ".pem"
    }

    package func hasFile(_ key: SessionKey) -> Bool { PosixFile.exists(path(for: key)) }

    /// Where the profile's key is, for people: its file, or the keyring.
    package func location(for key: SessionKey) -> String {
        hasFile(key) || vault == nil ? path(for: key) : "the desktop keyring"
    }

    /// The profile's key, if one was made: its file, else the keyring's item.
    package func load(_ key: SessionKey) throws -> AsymmetricKey? {
        let file = path(for: key)
        guard PosixFile.exists(file) else { return try loadFromKeyring(key) }
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

    private func loadFromKeyring(_ key: SessionKey) throws -> AsymmetricKey? {
        guard let vault else { return nil }
        let pem: [UInt8]?
        do {
            pem = try vault.read(.dpopKey, for: key)
        } catch {
            // `auto` on a machine without a keyring: there is simply no key there.
            switch error {
            case .unavailable, .noDefaultCollection: if !strict { return nil }
            case .locked, .failed: break
            }
            throw DPoPKeyError(KeyringVault.advice(error, key: key))
        }
        guard let pem else { return nil }
        do {
            return try AsymmetricKey(pem: String(decoding: pem, as: UTF8.self))
        } catch {
            throw DPoPKeyError(
                "the DPoP key in the keyring is not usable (\(error)); broker logout, then sign in again")
        }
    }

    /// The profile's key, made now if there is none (in a file; ``moveIntoKeyring(_:vault:)`` moves it).
    package func loadOrCreate(_ key: SessionKey) throws -> AsymmetricKey {
        if let existing = try load(key) { return existing }
        let made = try AsymmetricKey.generate(.ecP256)
        try PosixFile.ensurePrivateDirectory(directory, beneath: home)
        try PosixFile.writeAtomically(Array(try made.privateKeyPEM().utf8), to: path(for: key), mode: 0o600)
        return made
    }

    /// The key file's contents into the keyring, then the file removed (the keyring first: a crash in between
    /// leaves the key in both places, never in none).
    func moveIntoKeyring(_ key: SessionKey, vault: KeyringVault) throws {
        let file = path(for: key)
        guard PosixFile.exists(file) else { return }
        let bytes = try PosixFile.read(path: file, maxSize: 16 * 1024)
        try vault.write(bytes, .dpopKey, for: key)
        _ = unlink(file)
    }

    /// The keyring's key back into its file, then the item removed.
    func moveToFile(_ key: SessionKey, vault: KeyringVault) throws {
        guard !hasFile(key), let pem = try vault.read(.dpopKey, for: key) else { return }
        try PosixFile.ensurePrivateDirectory(directory, beneath: home)
        try PosixFile.writeAtomically(pem, to: path(for: key), mode: 0o600)
        try vault.delete(.dpopKey, for: key)
    }

    /// Forgets the profile's key (logout): the next sign-in makes a new one.
    package func remove(_ key: SessionKey) {
        _ = unlink(path(for: key))
        try? vault?.delete(.dpopKey, for: key)
    }
}

/// The profile's DPoP key, loaded at its first use (a command that sends no proof never reads it — nor the
/// keyring it may be in).
package final class ProofKeySource: Sendable {
    let load: @Sendable () -> AsymmetricKey?
    private let loaded = Mutex<AsymmetricKey??>(nil)

    package init(_ load: @escaping @Sendable () -> AsymmetricKey?) { self.load = load }

    package var key: AsymmetricKey? {
        loaded.withLock { (state: inout AsymmetricKey??) in
            if let state { return state }
            let key = load()
            state = .some(key)
            return key
        }
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
