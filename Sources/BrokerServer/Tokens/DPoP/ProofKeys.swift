import BrokerCrypto
import Synchronization

/// The keys of recent DPoP proofs, by the proof's header segment exactly as sent.
///
/// A client signs every proof with one key and sends the same header with each (`typ`, `alg` and the public key
/// in `jwk`), so the header's work — decoding the JWK, importing it into OpenSSL, its RFC 7638 thumbprint — is the
/// same for every request of a client.
/// What is kept is derived from the header bytes alone and only once every check of the header passed, so a cached
/// entry answers exactly as the checks would; the signature, the claims and the replay check still run on every
/// proof. Bounded: when full, the whole cache is dropped (a flood of keys costs what no cache would).
final class ProofKeys: Sendable {
    struct Entry: Sendable {
        /// The proof's public key, as the verifier takes it (under its `kid`, or its thumbprint without one).
        let keys: JWTKeySet
        let thumbprint: String
    }

    static let capacity = 4096
    private let entries = Mutex<[String: Entry]>([:])

    /// The entry for `header` (the proof's first segment), made by `make` when it is not kept; what `make` throws
    /// is thrown and nothing is kept.
    func entry<Failure: Error>(header: String, make: () throws(Failure) -> Entry) throws(Failure) -> Entry {
        if let kept = entries.withLock({ $0[header] }) { return kept }
        let made = try make()
        entries.withLock { entries in
            if entries.count >= Self.capacity { entries.removeAll(keepingCapacity: true) }
            entries[header] = made
        }
        return made
    }
}
