import BrokerCore
import BrokerCrypto
import BrokerSystem
import Synchronization

/// The signing keys as the running server sees them: who signs now, which keys verify, and the JWKS.
///
/// Keys generated in the data directory are re-read when `keys/keyring.json` changes (so `broker keys
/// rotate` takes effect without a restart) and retired keys leave the JWKS once every token they signed
/// has expired. A key given with `--signing-key` is the only key.
final class KeyManager: Sendable {
    enum Source: Sendable {
        case dataDirectory(String)
        case external(AsymmetricKey)
    }

    struct State: Sendable {
        let ring: KeyRing
        let signer: JWTSigner
        let keySet: JWTKeySet
        let jwks: JSONValue
        let algorithms: [String]
        let publishedKIDs: [String]
        let indexModified: Int64?
    }

    let source: Source
    /// How long a retired key stays published: the longest token lifetime plus the verifiers' leeway.
    let retention: Int64
    private let state: Mutex<State>

    init(source: Source, retention: Int64, now: Int64) throws {
        self.source = source
        self.retention = retention
        let ring: KeyRing
        var modified: Int64?
        switch source {
        case .external(let key):
            ring = KeyRing(
                current: SigningKeyEntry(kid: try key.thumbprint(), key: key, createdAt: now, retiredAt: nil),
                retired: []
            )
        case .dataDirectory(let directory):
            ring = try KeyRingStore.loadOrCreate(dataDirectory: directory, now: now)
            modified = PosixFile.modificationTime(KeyRingStore.indexPath(dataDirectory: directory))
        }
        state = Mutex(try Self.makeState(ring: ring, now: now, retention: retention, modified: modified))
    }

    var current: State { state.withLock { $0 } }

    /// Re-reads the key ring if its file changed, and drops retired keys whose tokens have all expired.
    /// Returns whether the published set changed; an unreadable ring keeps the keys in use (and throws).
    @discardableResult
    func refresh(now: Int64) throws -> Bool {
        let old = current
        var ring = old.ring
        var modified = old.indexModified
        if case .dataDirectory(let directory) = source {
            let stamp = PosixFile.modificationTime(KeyRingStore.indexPath(dataDirectory: directory))
            if stamp != old.indexModified {
                ring = try KeyRingStore.load(dataDirectory: directory)
                modified = stamp
            }
        }
        let published = ring.published(now: now, retention: retention).map(\.kid)
        guard published != old.publishedKIDs || ring.current.kid != old.ring.current.kid else {
            if modified != old.indexModified {
                let updated = try Self.makeState(ring: ring, now: now, retention: retention, modified: modified)
                state.withLock { $0 = updated }
            }
            return false
        }
        let updated = try Self.makeState(ring: ring, now: now, retention: retention, modified: modified)
        state.withLock { $0 = updated }
        return true
    }

    private static func makeState(ring: KeyRing, now: Int64, retention: Int64, modified: Int64?) throws -> State {
        let published = ring.published(now: now, retention: retention)
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
            algorithms: algorithms,
            publishedKIDs: published.map(\.kid),
            indexModified: modified
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
