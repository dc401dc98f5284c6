package import BrokerCore
package import BrokerCrypto
import BrokerStore
import BrokerSystem
import Synchronization

/// The signing keys as the running server sees them: who signs now, which keys verify, and the JWKS.
///
/// Keys in the store (``KeyVault``) are re-read when the stored ring changes (so `broker keys rotate`, run
/// against the same store, reaches every broker within a second or two without a restart), and retired keys
/// leave the JWKS once every token they signed has expired. A key given with `--signing-key` is the only key.
package final class KeyManager: Sendable {
    package enum Source: Sendable {
        case vault(KeyVault)
        case external(AsymmetricKey)
    }

    /// One set of keys and what is worked out from them. A class: every signed or verified token and every JWKS
    /// reads ``current``, which then takes one reference under the lock instead of copying a dozen fields (the
    /// copy was 2% of a JWKS request's CPU).
    package final class State: Sendable {
        package let ring: KeyRing
        let signer: JWTSigner
        let keySet: JWTKeySet
        package let jwks: JSONValue
        /// ``jwks`` as sent, serialized once per key set rather than once per request.
        let jwksBytes: [UInt8]
        let algorithms: [String]
        package let publishedKIDs: [String]
        /// The stored ring this state was built from (``KeyVault/fingerprint(_:)``); empty for an external key.
        let fingerprint: [String]
        /// Signs id tokens with RS256 (``KeyVault/idTokenKeys(now:generate:)``), when this broker has that key.
        let idTokenSigner: JWTSigner?
        /// The id-token keys, newest first (``KeyVault/IDTokenKeys``), and the stored secret they were read from.
        package let idTokenKeys: [AsymmetricKey]
        /// Their key ids (RFC 7638 thumbprints), worked out once per set of keys rather than at every refresh.
        let idTokenKIDs: [String]
        let idTokenStamp: String
        /// When the newest id-token key begins to sign, if it waits; and which one signs as of this state.
        let idTokenActivatesAt: Int64?
        let idTokenSigningIndex: Int

        init(
            ring: KeyRing, signer: JWTSigner, keySet: JWTKeySet, jwks: JSONValue, jwksBytes: [UInt8],
            algorithms: [String], publishedKIDs: [String], fingerprint: [String], idTokenSigner: JWTSigner?,
            idTokenKeys: [AsymmetricKey], idTokenKIDs: [String], idTokenStamp: String, idTokenActivatesAt: Int64?,
            idTokenSigningIndex: Int
        ) {
            self.idTokenActivatesAt = idTokenActivatesAt
            self.idTokenSigningIndex = idTokenSigningIndex
            self.ring = ring
            self.signer = signer
            self.keySet = keySet
            self.jwks = jwks
            self.jwksBytes = jwksBytes
            self.algorithms = algorithms
            self.publishedKIDs = publishedKIDs
            self.fingerprint = fingerprint
            self.idTokenSigner = idTokenSigner
            self.idTokenKeys = idTokenKeys
            self.idTokenKIDs = idTokenKIDs
            self.idTokenStamp = idTokenStamp
        }

        /// The signer of an id token with `algorithm` (an app's `--id-token-alg`): RS256 from the id-token key,
        /// else the ring's current key when it has that algorithm.
        func idTokenSigner(algorithm: String) -> JWTSigner? {
            if algorithm == "RS256", let idTokenSigner { return idTokenSigner }
            return ring.current.key.algorithm.rawValue == algorithm ? signer : nil
        }
    }

    package let source: Source
    /// Where the id-token keys are re-read from (a rotation by another process), if anywhere.
    package let idTokenVault: KeyVault?
    /// How long a retired key stays published: the longest token lifetime plus the verifiers' leeway.
    package let retention: Int64
    private let state: Mutex<State>

    private init(source: Source, idTokenVault: KeyVault?, retention: Int64, state: State) {
        self.source = source
        self.idTokenVault = idTokenVault
        self.retention = retention
        self.state = Mutex(state)
    }

    /// Loads the keys (creating or importing the first one for a vault).
    /// - Parameter idTokens: the id-token keys as read (``KeyVault/idTokenKeys(now:generate:)``) and the vault
    ///   to watch for their rotation.
    package static func make(
        source: Source, idTokens: (keys: KeyVault.IDTokenKeys, vault: KeyVault)? = nil, retention: Int64,
        now: Int64
    ) async throws -> KeyManager {
        let ring: KeyRing
        var fingerprint: [String] = []
        switch source {
        case .external(let key):
            ring = KeyRing(
                current: SigningKeyEntry(kid: try key.thumbprint(), key: key, createdAt: now, retiredAt: nil),
                retired: []
            )
        case .vault(let vault):
            ring = try await vault.ring(now: now)
            fingerprint = KeyVault.fingerprint(try await vault.store.signingKeys())
        }
        let idTokenKeys = idTokens?.keys.keys ?? []
        return KeyManager(
            source: source, idTokenVault: idTokens?.vault, retention: retention,
            state: try makeState(
                ring: ring, idTokenKeys: idTokenKeys, idTokenKIDs: try idTokenKeys.map { try $0.thumbprint() },
                idTokenStamp: idTokens?.keys.stamp ?? "", idTokenActivatesAt: idTokens?.keys.activatesAt, now: now,
                retention: retention, fingerprint: fingerprint))
    }

    package var current: State { state.withLock { $0 } }

    /// Re-reads the key ring if the store's changed, and drops retired keys whose tokens have all expired.
    /// Returns whether the published set changed; an unreadable ring keeps the keys in use (and throws).
    @discardableResult
    package func refresh(now: Int64) async throws -> Bool {
        let old = current
        var ring = old.ring
        var fingerprint = old.fingerprint
        if case .vault(let vault) = source {
            let stored = try await vault.store.signingKeys()
            let stamp = KeyVault.fingerprint(stored)
            if stamp != old.fingerprint {
                ring = try vault.open(stored)
                fingerprint = stamp
            }
        }
        var idTokenKeys = old.idTokenKeys
        var idTokenKIDs = old.idTokenKIDs
        var idTokenStamp = old.idTokenStamp
        var idTokenActivatesAt = old.idTokenActivatesAt
        if let idTokenVault, let rotated = try await idTokenVault.idTokenKeysIfChanged(since: old.idTokenStamp) {
            (idTokenKeys, idTokenStamp, idTokenActivatesAt) = (rotated.keys, rotated.stamp, rotated.activatesAt)
            idTokenKIDs = try idTokenKeys.map { try $0.thumbprint() }
        }
        let published = ring.published(now: now, retention: retention).map(\.kid) + idTokenKIDs
        let changed = published != old.publishedKIDs || ring.current.kid != old.ring.current.kid
        // A published id-token key whose time to sign has come (KeyVault.rotateIDTokenKey(now:activateIn:)).
        let activated =
            KeyVault.IDTokenKeys.signingIndex(keyCount: idTokenKeys.count, activatesAt: idTokenActivatesAt, now: now)
            != old.idTokenSigningIndex
        if changed || activated || fingerprint != old.fingerprint {
            let updated = try Self.makeState(
                ring: ring, idTokenKeys: idTokenKeys, idTokenKIDs: idTokenKIDs, idTokenStamp: idTokenStamp,
                idTokenActivatesAt: idTokenActivatesAt, now: now, retention: retention, fingerprint: fingerprint)
            state.withLock { $0 = updated }
        }
        return changed
    }

    /// - Parameter idTokenKIDs: the thumbprints of `idTokenKeys`, in the same order (taken once, by the caller
    ///   that read the keys).
    private static func makeState(
        ring: KeyRing, idTokenKeys: [AsymmetricKey], idTokenKIDs: [String], idTokenStamp: String,
        idTokenActivatesAt: Int64?, now: Int64, retention: Int64, fingerprint: [String]
    ) throws -> State {
        precondition(idTokenKeys.count == idTokenKIDs.count, "one key id per id-token key")
        var published = ring.published(now: now, retention: retention)
        var idTokenSigner: JWTSigner?
        let signing = KeyVault.IDTokenKeys.signingIndex(
            keyCount: idTokenKeys.count, activatesAt: idTokenActivatesAt, now: now)
        for (index, (key, kid)) in zip(idTokenKeys, idTokenKIDs).enumerated() {
            if index == signing { idTokenSigner = try JWTSigner(key: key, kid: kid) }
            published.append(SigningKeyEntry(kid: kid, key: key, createdAt: 0, retiredAt: nil))
        }
        var keySet = JWTKeySet()
        var jwks: [JSONValue] = []
        for entry in published {
            try keySet.add(entry.key, kid: entry.kid)
            var jwk = try entry.key.jwk()
            jwk.kid = entry.kid
            jwks.append(jwk.jsonValue)
        }
        var algorithms: [String] = []
        for entry in published where !algorithms.contains(entry.key.algorithm.rawValue) {
            algorithms.append(entry.key.algorithm.rawValue)
        }
        return State(
            ring: ring,
            signer: try JWTSigner(key: ring.current.key, kid: ring.current.kid),
            keySet: keySet,
            jwks: .object(["keys": .array(jwks)]),
            jwksBytes: JSONValue.object(["keys": .array(jwks)]).serializedBytes + [UInt8(ascii: "\n")],
            algorithms: algorithms,
            publishedKIDs: published.map(\.kid),
            fingerprint: fingerprint,
            idTokenSigner: idTokenSigner,
            idTokenKeys: idTokenKeys,
            idTokenKIDs: idTokenKIDs,
            idTokenStamp: idTokenStamp,
            idTokenActivatesAt: idTokenActivatesAt,
            idTokenSigningIndex: signing
        )
    }
}

extension JWK {
    /// The public members as JSON (private members are never published).
    var jsonValue: JSONValue {
        var members: [String: JSONValue] = ["kty": .string(kty)]
        let optional: [(String, String?)] = [
            ("crv", crv), ("x", x), ("y", y), ("n", n), ("e", e), ("kid", kid), ("alg", alg), ("use", use),
        ]
        for (name, value) in optional {
            if let value { members[name] = .string(value) }
        }
        return .object(members)
    }
}
