package import BrokerCore
package import BrokerCrypto
import BrokerSystem

#if canImport(Glibc)
    import Glibc
#endif

/// One signing key of the broker and its place in the rotation.
package struct SigningKeyEntry: Sendable {
    package let kid: String
    package let key: AsymmetricKey
    package let createdAt: Int64
    /// When a newer key took over; `nil` for the current key.
    package let retiredAt: Int64?
}

/// The broker's signing keys: one current key that signs, and retired keys that still verify.
package struct KeyRing: Sendable {
    package let current: SigningKeyEntry
    package let retired: [SigningKeyEntry]

    /// The keys to publish and accept at `now`: the current key, and each retired key until every token it
    /// can have signed has expired (`retention` after its retirement).
    package func published(now: Int64, retention: Int64) -> [SigningKeyEntry] {
        [current] + retired.filter { ($0.retiredAt ?? now) + retention > now }
    }
}

/// The generated keys in the data directory: `keys/keyring.json` lists them, `keys/<kid>.pem` holds each
/// private key (0600, in a 0700 directory). Changes are made under `keys/.lock` and written atomically.
package enum KeyRingStore {
    package struct Failure: Error, Sendable, CustomStringConvertible {
        package let description: String
    }

    static let format = 1

    package static func directory(dataDirectory: String) -> String { dataDirectory + "/keys" }
    package static func indexPath(dataDirectory: String) -> String {
        directory(dataDirectory: dataDirectory) + "/keyring.json"
    }

    /// Loads the key ring, generating a first ES256 key when there is none yet.
    package static func loadOrCreate(dataDirectory: String, now: Int64) throws(Failure) -> KeyRing {
        let directory = directory(dataDirectory: dataDirectory)
        do {
            try PosixFile.ensurePrivateDirectory(directory)
            let lock = try FileLock(path: directory + "/.lock")
            defer { lock.unlock() }
            if PosixFile.exists(indexPath(dataDirectory: dataDirectory)) {
                return try load(dataDirectory: dataDirectory)
            }
            let entry = try generate(kind: .ecP256, directory: directory, now: now)
            try writeIndex([entry], dataDirectory: dataDirectory)
            return KeyRing(current: entry, retired: [])
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure(description: "signing keys in \(directory): \(error)")
        }
    }

    /// Reads the key ring; a missing, corrupt or inconsistent index is an error naming the file.
    package static func load(dataDirectory: String) throws(Failure) -> KeyRing {
        let path = indexPath(dataDirectory: dataDirectory)
        let bytes: [UInt8]
        do {
            bytes = try PosixFile.read(path: path, maxSize: 1024 * 1024)
        } catch {
            throw Failure(description: "cannot read the key ring: \(error)")
        }
        guard let document = JSONValue.parse(bytes), let root = document.objectValue else {
            throw Failure(
                description:
                    "\(path) is not valid JSON; restore it from a backup (it is never rewritten while unreadable)")
        }
        guard root["format"]?.intValue == Int64(format), let list = root["keys"]?.arrayValue else {
            throw Failure(description: "\(path): unsupported format (expected \"format\": \(format) and \"keys\")")
        }
        var current: SigningKeyEntry?
        var retired: [SigningKeyEntry] = []
        for item in list {
            guard let kid = item["kid"]?.stringValue, let created = item["created_at"]?.intValue,
                kid.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }), !kid.isEmpty
            else {
                throw Failure(description: "\(path): a key entry lacks a valid kid or created_at")
            }
            let pemPath = directory(dataDirectory: dataDirectory) + "/\(kid).pem"
            let key: AsymmetricKey
            do {
                key = try SigningKeyFile.load(path: pemPath)
            } catch {
                throw Failure(description: "key \(kid) listed in \(path): \(error)")
            }
            let entry = SigningKeyEntry(kid: kid, key: key, createdAt: created, retiredAt: item["retired_at"]?.intValue)
            if entry.retiredAt == nil {
                guard current == nil else { throw Failure(description: "\(path): more than one current key") }
                current = entry
            } else {
                retired.append(entry)
            }
        }
        guard let current else { throw Failure(description: "\(path): no current key") }
        return KeyRing(current: current, retired: retired)
    }

    /// Makes a new key current and retires the previous one; keys retired longer than `retention` ago are
    /// removed. Returns the new ring.
    package static func rotate(
        dataDirectory: String,
        kind: KeyKind,
        now: Int64,
        retention: Int64
    ) throws(Failure) -> KeyRing {
        let directory = directory(dataDirectory: dataDirectory)
        do {
            try PosixFile.ensurePrivateDirectory(directory)
            let lock = try FileLock(path: directory + "/.lock")
            defer { lock.unlock() }
            var entries: [SigningKeyEntry] = []
            if PosixFile.exists(indexPath(dataDirectory: dataDirectory)) {
                let ring = try load(dataDirectory: dataDirectory)
                let previous = SigningKeyEntry(
                    kid: ring.current.kid,
                    key: ring.current.key,
                    createdAt: ring.current.createdAt,
                    retiredAt: now
                )
                let kept = ring.retired.filter { ($0.retiredAt ?? now) + retention > now }
                for gone in ring.retired where !kept.contains(where: { $0.kid == gone.kid }) {
                    unlink(directory + "/\(gone.kid).pem")
                }
                entries = [previous] + kept
            }
            let fresh = try generate(kind: kind, directory: directory, now: now)
            try writeIndex([fresh] + entries, dataDirectory: dataDirectory)
            return KeyRing(current: fresh, retired: entries)
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure(description: "signing keys in \(directory): \(error)")
        }
    }

    private static func generate(kind: KeyKind, directory: String, now: Int64) throws -> SigningKeyEntry {
        let key = try AsymmetricKey.generate(kind)
        let kid = try key.thumbprint()
        try PosixFile.writeAtomically(Array(try key.privateKeyPEM().utf8), to: directory + "/\(kid).pem", mode: 0o600)
        return SigningKeyEntry(kid: kid, key: key, createdAt: now, retiredAt: nil)
    }

    private static func writeIndex(_ entries: [SigningKeyEntry], dataDirectory: String) throws {
        let keys: [JSONValue] = entries.map { entry in
            var item: [String: JSONValue] = [
                "kid": .string(entry.kid), "alg": .string(entry.key.algorithm.rawValue),
                "created_at": .int(entry.createdAt),
            ]
            if let retired = entry.retiredAt { item["retired_at"] = .int(retired) }
            return .object(item)
        }
        let document = JSONValue.object(["format": .int(Int64(format)), "keys": .array(keys)])
        try PosixFile.writeAtomically(
            Array((document.serialized() + "\n").utf8), to: indexPath(dataDirectory: dataDirectory))
    }
}
