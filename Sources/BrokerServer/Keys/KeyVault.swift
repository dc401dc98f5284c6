package import BrokerConfiguration
import BrokerCore
package import BrokerCrypto
package import BrokerStore
import BrokerSystem

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The key that seals the broker's own keys in the store (AES-256-GCM): signing keys' private halves, the
/// client-secret HMAC key and the sign-in sealing key. Every broker on one database is given the same one;
/// the database alone opens none of them.
package struct MasterKey: Sendable {
    package let bytes: [UInt8]
    /// Where it came from, for error messages (`--master-key-file /etc/broker/master.key`, `BROKER_MASTER_KEY`).
    package let origin: String

    package struct Failure: Error, Sendable, CustomStringConvertible {
        package let description: String
    }

    package init(bytes: [UInt8], origin: String) {
        self.bytes = bytes
        self.origin = origin
    }

    /// The file name under the data directory's `keys/` of a single SQLite broker's generated master key.
    static let fileName = "master.key"

    /// The master key: `master_key_file` (or `--master-key-file`), else `BROKER_MASTER_KEY`, else — for a
    /// store only this broker uses — one generated in the data directory (`keys/master.key`, 0600). A shared
    /// (PostgreSQL) store without one is an error: brokers that each made their own could not read each
    /// other's keys.
    package static func load(
        configuration: ServerConfiguration, environment: [String: String], store: any Store
    ) async throws -> MasterKey {
        if let file = configuration.masterKeyFile {
            let path = PosixFile.expandingTilde(file)
            let bytes: [UInt8]
            do {
                bytes = try PosixFile.read(path: path, maxSize: 4096)
            } catch {
                throw Failure(description: "cannot read the master key file \(path): \(error.reason)")
            }
            return try parse(String(decoding: bytes, as: UTF8.self), origin: "master key file \(path)")
        }
        if let text = environment["BROKER_MASTER_KEY"] {
            return try parse(text, origin: "BROKER_MASTER_KEY")
        }
        guard !store.isShared else {
            throw Failure(
                description: "a shared database needs the master key every broker on it is given: "
                    + "--master-key-file FILE, server.master_key_file or BROKER_MASTER_KEY "
                    + "(make one with: openssl rand -base64 32)")
        }
        let directory = configuration.expandedDataDirectory
        let path = KeyRingStore.directory(dataDirectory: directory) + "/" + fileName
        if !PosixFile.exists(path) {
            // Never a silent new key over sealed ones: they would be unreadable and the broker would look new.
            let sealed = try await !store.signingKeys().isEmpty
            if sealed {
                throw Failure(
                    description: "\(path) is missing, but the database holds keys sealed under it; restore the "
                        + "file (or give the key with --master-key-file / BROKER_MASTER_KEY)")
            }
        }
        return MasterKey(
            bytes: try DataDirectoryKey.load(dataDirectory: directory, name: fileName), origin: "master key \(path)")
    }

    /// 32 bytes in base64 or base64url (surrounding whitespace ignored).
    package static func parse(_ text: String, origin: String) throws -> MasterKey {
        let trimmed = text.trimmingWhitespace()
        let bytes = Base64URL.decode(trimmed) ?? Base64URL.decode(Self.base64URL(trimmed))
        guard let bytes, bytes.count == AESGCM.keySize else {
            throw Failure(
                description: "the \(origin) is not 32 bytes in base64 (make one with: openssl rand -base64 32)")
        }
        return MasterKey(bytes: bytes, origin: origin)
    }

    private static func base64URL(_ text: String) -> String {
        String(
            text.compactMap { character -> Character? in
                switch character {
                case "+": "-"
                case "/": "_"
                case "=": nil
                default: character
                }
            })
    }

    func seal(_ plaintext: [UInt8], label: String) throws -> String {
        Base64URL.encode(try AESGCM.seal(plaintext, key: bytes, associatedData: Array(label.utf8)))
    }

    /// Opens what ``seal(_:label:)`` made for the same label; a wrong master key is an error naming both.
    func open(_ sealed: String, label: String) throws -> [UInt8] {
        guard let box = Base64URL.decode(sealed),
            let plaintext = AESGCM.open(box, key: bytes, associatedData: Array(label.utf8))
        else {
            throw Failure(
                description: "the \(origin) does not open the \(label) stored in the database "
                    + "(a different master key sealed it: give every broker the same one)")
        }
        return plaintext
    }
}

/// The broker's keys in the store, sealed under the ``MasterKey``: the signing key ring, and named secret
/// keys (the client-secret HMAC key, the sign-in sealing key). A data directory from before keys moved into
/// the store (`keys/keyring.json`, `keys/*.pem`, `keys/client-secrets.key`, `keys/flow-state.key`) is
/// imported on first use, so existing tokens, client secrets and pending sign-ins keep working.
package struct KeyVault: Sendable {
    package let store: any Store
    package let master: MasterKey
    /// Where to look for keys from before they moved into the store (`nil`: nowhere).
    package let legacyDataDirectory: String?

    package init(store: any Store, master: MasterKey, legacyDataDirectory: String?) {
        self.store = store
        self.master = master
        self.legacyDataDirectory = legacyDataDirectory
    }

    static func label(kid: String) -> String { "broker signing key \(kid)" }
    static func label(secret name: String) -> String { "broker secret key \(name)" }

    /// The key ring, creating the first key (or importing the data directory's) when the store has none.
    package func ring(now: Int64) async throws -> KeyRing {
        let stored = try await store.signingKeys()
        if stored.contains(where: { $0.retiredAt == nil }) { return try open(stored) }
        if let directory = legacyDataDirectory, PosixFile.exists(KeyRingStore.indexPath(dataDirectory: directory)) {
            let legacy = try KeyRingStore.load(dataDirectory: directory)
            // Retired keys first: the current one goes in last, once no other broker has made one.
            for entry in legacy.retired {
                _ = try await store.addFirstSigningKey(try sealed(entry))
            }
            _ = try await store.addFirstSigningKey(try sealed(legacy.current))
        } else {
            let key = try AsymmetricKey.generate(.ecP256)
            let entry = SigningKeyEntry(kid: try key.thumbprint(), key: key, createdAt: now, retiredAt: nil)
            _ = try await store.addFirstSigningKey(try sealed(entry))
        }
        return try open(try await store.signingKeys())
    }

    /// Makes a new key of `kind` current for every broker on the store; the previous one is retired (and
    /// stays published for `retention`), keys retired longer ago are deleted.
    package func rotate(kind: KeyKind, now: Int64, retention: Int64) async throws -> KeyRing {
        _ = try await ring(now: now)
        let key = try AsymmetricKey.generate(kind)
        let entry = SigningKeyEntry(kid: try key.thumbprint(), key: key, createdAt: now, retiredAt: nil)
        try await store.rotateSigningKey(to: try sealed(entry), now: now, dropRetiredBefore: now - retention)
        return try open(try await store.signingKeys())
    }

    /// A stored key ring's fingerprint: which keys, and which is current (to notice a rotation cheaply).
    static func fingerprint(_ stored: [StoredSigningKey]) -> [String] {
        stored.map { "\($0.kid):\($0.retiredAt.map(String.init) ?? "current")" }
    }

    func open(_ stored: [StoredSigningKey]) throws -> KeyRing {
        var current: SigningKeyEntry?
        var retired: [SigningKeyEntry] = []
        for item in stored {
            let pem = try master.open(item.sealedKey, label: Self.label(kid: item.kid))
            let key: AsymmetricKey
            do {
                key = try AsymmetricKey(pem: String(decoding: pem, as: UTF8.self))
            } catch {
                throw MasterKey.Failure(description: "signing key \(item.kid) in the database is unusable: \(error)")
            }
            let entry = SigningKeyEntry(kid: item.kid, key: key, createdAt: item.createdAt, retiredAt: item.retiredAt)
            if item.retiredAt == nil { current = entry } else { retired.append(entry) }
        }
        guard let current else {
            throw MasterKey.Failure(description: "the database holds no current signing key")
        }
        return KeyRing(current: current, retired: retired.sorted { ($0.retiredAt ?? 0) > ($1.retiredAt ?? 0) })
    }

    private func sealed(_ entry: SigningKeyEntry) throws -> StoredSigningKey {
        StoredSigningKey(
            kid: entry.kid, algorithm: entry.key.algorithm.rawValue,
            sealedKey: try master.seal(Array(try entry.key.privateKeyPEM().utf8), label: Self.label(kid: entry.kid)),
            createdAt: entry.createdAt, retiredAt: entry.retiredAt)
    }

    /// The secret that holds the RSA keys of id tokens.
    static let idTokenSecret = "id-token-rs256"

    /// The RSA keys id tokens are signed with (RS256, which OpenID Connect requires of every provider; the
    /// access tokens keep the ring's key), newest first: the signing one, then the one it replaced (still
    /// published, so id tokens it signed keep verifying) — or, after a rotation that publishes its key ahead
    /// (``rotateIDTokenKey(now:activateIn:)``), the new key first, which signs from ``IDTokenKeys/activatesAt``
    /// on and is only published until then. Sealed in the store like the other keys, as one secret holding
    /// their PEMs (after an `activates-at: T` line when one waits), so that a rotation replaces them at once.
    /// The first broker to store one wins.
    /// - Parameter generate: makes the first key when the store has none (tests hand in one made once).
    package func idTokenKeys(
        now: Int64, generate: @Sendable () throws -> AsymmetricKey = { try AsymmetricKey.generate(.rsa(bits: 2048)) }
    ) async throws -> IDTokenKeys {
        if let stored = try await store.secretKey(name: Self.idTokenSecret) {
            return try openIDTokenKeys(stored)
        }
        let sealed = try sealIDTokenKeys([try generate()], activatesAt: nil)
        let stored = try await store.secretKey(name: Self.idTokenSecret, orInsert: sealed, now: now)
        return try openIDTokenKeys(stored)
    }

    /// The id-token keys as stored: newest first, when the newest signs, and the sealed text they came from.
    package struct IDTokenKeys: Sendable {
        package var keys: [AsymmetricKey]
        /// When ``keys``' first begins to sign (the second signs until then); `nil`: it signs now.
        package var activatesAt: Int64?
        /// The sealed text (to notice a change cheaply, and to replace it compare-and-set).
        package var stamp: String

        /// Which of ``keys`` signs at `now`: the newest, unless it waits for ``activatesAt``.
        package func signingIndex(at now: Int64) -> Int {
            Self.signingIndex(keyCount: keys.count, activatesAt: activatesAt, now: now)
        }

        /// The rule of ``signingIndex(at:)``, for whoever holds the keys' parts apart (``KeyManager``).
        static func signingIndex(keyCount: Int, activatesAt: Int64?, now: Int64) -> Int {
            guard let activatesAt, now < activatesAt, keyCount > 1 else { return 0 }
            return 1
        }
    }

    /// The stored id-token keys again, when they changed since `stamp` (another broker rotated them).
    func idTokenKeysIfChanged(since stamp: String) async throws -> IDTokenKeys? {
        guard let stored = try await store.secretKey(name: Self.idTokenSecret), stored != stamp else { return nil }
        return try openIDTokenKeys(stored)
    }

    /// `broker keys rotate`: a new RSA key for id tokens, published at once and signing from `activateIn`
    /// seconds on (0: at once), so that relying parties that cache the JWKS have it before they meet it (Core
    /// 10.1.1; oidcc-server-rotate-keys); the key it replaces stays published. A rotation while a key waits
    /// settles that one first.
    package func rotateIDTokenKey(now: Int64, activateIn: Int64 = 0) async throws -> IDTokenKeys {
        for _ in 0..<5 {
            let stored = try await idTokenKeys(now: now)
            // The key signing now stays, and while a new one still waits, so does the one before it (a waiting
            // key never signed, and is dropped).
            let signing = stored.signingIndex(at: now)
            let kept = signing == 1 ? stored.keys.dropFirst().prefix(2) : stored.keys.prefix(1)
            let rotated = [try AsymmetricKey.generate(.rsa(bits: 2048))] + kept
            let activatesAt = activateIn > 0 ? now + activateIn : nil
            let sealed = try sealIDTokenKeys(Array(rotated), activatesAt: activatesAt)
            if try await store.replaceSecretKey(name: Self.idTokenSecret, expected: stored.stamp, with: sealed) {
                return IDTokenKeys(keys: Array(rotated), activatesAt: activatesAt, stamp: sealed)
            }
        }
        throw MasterKey.Failure(description: "the id-token key changed under five rotations in a row")
    }

    private static let activationPrefix = "activates-at: "

    private func sealIDTokenKeys(_ keys: [AsymmetricKey], activatesAt: Int64?) throws -> String {
        let pems = try keys.map { try $0.privateKeyPEM() }.joined()
        let header = activatesAt.map { Self.activationPrefix + String($0) + "\n" } ?? ""
        return try master.seal(Array((header + pems).utf8), label: Self.label(secret: Self.idTokenSecret))
    }

    private func openIDTokenKeys(_ sealed: String) throws -> IDTokenKeys {
        let text = String(
            decoding: try master.open(sealed, label: Self.label(secret: Self.idTokenSecret)), as: UTF8.self)
        var keys: [AsymmetricKey] = []
        var activatesAt: Int64?
        var pem = ""
        for line in text.split(separator: "\n") {
            if keys.isEmpty, pem.isEmpty, line.hasPrefix(Self.activationPrefix) {
                guard let time = Int64(line.dropFirst(Self.activationPrefix.count)) else {
                    throw MasterKey.Failure(description: "the stored id-token keys have an unreadable activation time")
                }
                activatesAt = time
                continue
            }
            pem += line + "\n"
            if line.hasPrefix("-----END") {
                keys.append(try AsymmetricKey(pem: pem))
                pem = ""
            }
        }
        guard !keys.isEmpty, activatesAt == nil || keys.count >= 2 else {
            throw MasterKey.Failure(description: "the stored id-token key is unusable")
        }
        return IDTokenKeys(keys: keys, activatesAt: activatesAt, stamp: sealed)
    }

    /// The 256-bit secret key called `name` (`client-secrets`, `flow-state`): the store's, else the data
    /// directory's `keys/<name>.key` from before, else a new one; the first broker to store one wins.
    package func secretKey(_ name: String, now: Int64) async throws -> [UInt8] {
        let label = Self.label(secret: name)
        if let stored = try await store.secretKey(name: name) { return try master.open(stored, label: label) }
        var key = try SecureRandom.bytes(32)
        if let directory = legacyDataDirectory,
            PosixFile.exists(KeyRingStore.directory(dataDirectory: directory) + "/\(name).key")
        {
            key = try DataDirectoryKey.load(dataDirectory: directory, name: "\(name).key")
        }
        let stored = try await store.secretKey(name: name, orInsert: try master.seal(key, label: label), now: now)
        return try master.open(stored, label: label)
    }
}
