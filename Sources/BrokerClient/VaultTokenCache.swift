package import BrokerCore
package import BrokerCredentials
import BrokerKeyring
import BrokerSystem
import Glibc
import Synchronization

/// The credential store with the desktop keyring (issue "Keyring"): sessions stay in `credentials.json`, but
/// a session's refresh token — and the profile's DPoP key — go to the keyring when `credential_store` says so
/// (`keyring`), or when it answers and is unlocked (`auto`). The access token stays in the file, so reads
/// without the lock (a warm `broker token`) never touch the keyring; the refresh token is read from it under
/// the file's lock, where a refresh happens, so single-flight refresh is unchanged.
///
/// `auto` without a usable keyring keeps the secrets in the file and says so on stderr, once per
/// `BROKER_HOME` — never silently. A session moves when the setting changes: `keyring` or `file` set, the next
/// command that reads it moves its secrets there.
package final class VaultTokenCache: TokenCache {
    package let file: FileTokenCache
    package let setting: CredentialStore
    package let vault: KeyringVault
    let keys: DPoPKeyStore
    let notice: @Sendable (String) -> Void

    package init(
        file: FileTokenCache, setting: CredentialStore, vault: KeyringVault, keys: DPoPKeyStore,
        notice: @escaping @Sendable (String) -> Void
    ) {
        self.file = file
        self.setting = setting
        self.vault = vault
        self.keys = keys
        self.notice = notice
    }

    /// Whether `session`'s secrets are not where the setting wants them (`auto` moves nothing on a read).
    func misplaced(_ session: Session) -> Bool {
        switch setting {
        case .auto: false
        case .file: session.secretsInKeyring
        case .keyring: !session.secretsInKeyring && (session.refreshToken != nil || keys.hasFile(session.key))
        }
    }

    package func session(for key: SessionKey) throws(TokenCacheError) -> Session? {
        guard let session = try file.session(for: key) else { return nil }
        guard misplaced(session) else { return session }
        let locked = try Locked(cache: self, inner: try file.locked())
        defer { locked.unlock() }
        return try locked.session(for: key)
    }

    package func sessions() throws(TokenCacheError) -> [Session] { try file.sessions() }

    package func locked() throws(TokenCacheError) -> any LockedTokenCache {
        try Locked(cache: self, inner: try file.locked())
    }

    /// Where a session about to be saved goes.
    func place(_ key: SessionKey) throws(TokenCacheError) -> Bool {
        switch setting {
        case .file: return false
        case .keyring:
            guard let failure = vault.availability() else { return true }
            throw .keyring(
                "credential_store is \"keyring\" but " + KeyringVault.advice(failure, key: key))
        case .auto:
            guard let failure = vault.availability() else { return true }
            tellOnce(failure)
            return false
        }
    }

    /// The notice of `auto` without a keyring, once per `BROKER_HOME` (a marker file remembers it).
    func tellOnce(_ failure: SecretService.Failure) {
        let marker = file.directory + "/keyring-notice"
        guard !PosixFile.exists(marker) else { return }
        try? PosixFile.ensurePrivateDirectory(file.directory)
        try? PosixFile.writeAtomically(Array("\(failure)\n".utf8), to: marker, mode: 0o600)
        notice(
            "no usable desktop keyring (\(failure.reason)): refresh tokens are kept in \(file.path) (0600). "
                + "Set \"credential_store\": \"file\" in the client config to say that is what you want, or "
                + "\"keyring\" to require the keyring. (This notice is shown once.)")
    }

    /// The store under the file's lock, with the keyring's secrets filled in and put away.
    final class Locked: LockedTokenCache {
        let cache: VaultTokenCache
        let inner: any LockedTokenCache

        init(cache: VaultTokenCache, inner: any LockedTokenCache) throws(TokenCacheError) {
            self.cache = cache
            self.inner = inner
        }

        func sessions() throws(TokenCacheError) -> [Session] { try inner.sessions() }

        func session(for key: SessionKey) throws(TokenCacheError) -> Session? {
            guard var session = try inner.session(for: key) else { return nil }
            if session.secretsInKeyring {
                do {
                    session.refreshToken = try cache.vault.read(.refreshToken, for: key).map {
                        Secret(String(decoding: $0, as: UTF8.self))
                    }
                } catch {
                    throw .keyring(KeyringVault.advice(error, key: key))
                }
            }
            if cache.misplaced(session) { session = try save(session) }
            return session
        }

        @discardableResult
        func save(_ session: Session) throws(TokenCacheError) -> Session {
            var stored = session
            var intoKeyring = try cache.place(session.key)
            if intoKeyring {
                do {
                    if let refresh = session.refreshToken {
                        try cache.vault.write(Array(refresh.exposed.utf8), .refreshToken, for: session.key)
                    } else {
                        try cache.vault.delete(.refreshToken, for: session.key)
                    }
                    try cache.keys.moveIntoKeyring(session.key, vault: cache.vault)
                } catch {
                    let failure = error as? SecretService.Failure ?? .failed("\(error)")
                    // `auto`: a keyring that answered but could not take the secrets (too slow, full, gone
                    // meanwhile) is no keyring — the file, and the notice; never a lost session.
                    guard cache.setting == .auto else {
                        throw .keyring(KeyringVault.advice(failure, key: session.key))
                    }
                    cache.tellOnce(failure)
                    try? cache.vault.delete(.refreshToken, for: session.key)
                    intoKeyring = false
                }
            }
            if intoKeyring {
                stored.refreshToken = nil
                stored.secretsInKeyring = true
                try inner.save(stored)
                stored.refreshToken = session.refreshToken
                return stored
            } else {
                // Where the secrets were: only a session leaving the keyring has items to clear there.
                let previous = try inner.session(for: session.key)
                stored.secretsInKeyring = false
                // The file first: a crash between the two steps leaves the secrets in both places, never in none.
                if previous?.secretsInKeyring == true || session.secretsInKeyring {
                    do {
                        try cache.keys.moveToFile(session.key, vault: cache.vault)
                    } catch {
                        throw .keyring("the DPoP key could not move out of the keyring: \(error)")
                    }
                }
                try inner.save(stored)
                if previous?.secretsInKeyring == true || session.secretsInKeyring {
                    try? cache.vault.delete(.refreshToken, for: session.key)
                }
                return stored
            }
        }

        func remove(_ key: SessionKey) throws(TokenCacheError) {
            let previous = try inner.session(for: key)
            try inner.remove(key)
            if previous?.secretsInKeyring == true { try? cache.vault.delete(.refreshToken, for: key) }
        }

        func unlock() { inner.unlock() }
    }
}

extension ClientSettings {
    /// The credential store of these settings: the file, with the keyring as `credential_store` says.
    /// ``keyringMayPrompt``: this command may show the desktop's unlock prompt (`broker login` on a terminal);
    /// every other command gets an answer within two seconds.
    package func credentials() -> VaultTokenCache {
        let interactive = keyringMayPrompt
        return VaultTokenCache(
            file: cache, setting: credentialStore, vault: vault(interactive: interactive),
            keys: dpopKeys(interactive: interactive),
            notice: { message in
                let line = Array(("broker: " + message + "\n").utf8)
                _ = line.withUnsafeBytes { Glibc.write(2, $0.baseAddress, $0.count) }
            })
    }

    /// The keyring of these settings, one per process and kind of command (a command opens it once).
    package func vault(interactive: Bool = false) -> KeyringVault {
        KeyringVault.shared(environment: environment, home: home, interactive: interactive, signingIn: signingIn)
    }
}

extension KeyringVault {
    private static let opened = Mutex<[String: KeyringVault]>([:])

    /// The process's vault for this environment's bus and this kind of command.
    package static func shared(
        environment: [String: String], home: String, interactive: Bool, signingIn: Bool = false
    ) -> KeyringVault {
        let budget = interactive ? promptBudget : signingIn ? signInBudget : quickBudget
        let name =
            (environment["DBUS_SESSION_BUS_ADDRESS"] ?? "") + "|" + (environment["XDG_RUNTIME_DIR"] ?? "") + "|"
            + (interactive ? "interactive" : "quick") + "|\(budget)|" + home
        return opened.withLock { vaults in
            if let vault = vaults[name] { return vault }
            let vault = KeyringVault(environment: environment, home: home, interactive: interactive, budget: budget)
            vaults[name] = vault
            return vault
        }
    }
}
