package import BrokerCrypto
import BrokerSystem

/// Loads a PEM private key from a file, with errors that name the file and say what is wrong.
package enum SigningKeyFile {
    package struct LoadError: Error, CustomStringConvertible {
        package let description: String
    }

    /// Largest key file read: a PEM RSA-8192 private key is under 7 KiB.
    static let maxSize = 64 * 1024

    package static func load(path: String) throws -> AsymmetricKey {
        let bytes: [UInt8]
        do {
            bytes = try PosixFile.read(path: path, maxSize: maxSize)
        } catch {
            throw LoadError(description: "cannot read signing key \(path): \(error.reason)")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw LoadError(description: "\(path) is not a PEM key (not text)")
        }
        let key: AsymmetricKey
        do {
            key = try AsymmetricKey(pem: text)
        } catch {
            throw LoadError(description: "\(path) is not a usable signing key: \(error)")
        }
        guard key.isPrivate else {
            throw LoadError(description: "\(path) holds a public key; signing needs the private key")
        }
        return key
    }
}
