import BrokerCore
package import BrokerCrypto
import BrokerSystem
import Glibc

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

/// The keys a data directory held before they moved into the store (``KeyVault``): `keys/keyring.json` lists
/// them, `keys/<kid>.pem` holds each private key. Read once, to import them; never written.
package enum KeyRingStore {
    package struct Failure: Error, Sendable, CustomStringConvertible {
        package let description: String
    }

    static let format = 1

    package static func directory(dataDirectory: String) -> String { dataDirectory + "/keys" }
    package static func indexPath(dataDirectory: String) -> String {
        directory(dataDirectory: dataDirectory) + "/keyring.json"
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
}
