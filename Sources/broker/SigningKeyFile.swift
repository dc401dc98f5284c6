import BrokerCrypto

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Loads a PEM private key from a file, with errors that name the file and say what is wrong.
enum SigningKeyFile {
    struct LoadError: Error, CustomStringConvertible {
        let description: String
    }

    /// Largest key file read: a PEM RSA-8192 private key is under 7 KiB.
    static let maxSize = 64 * 1024

    static func load(path: String) throws -> AsymmetricKey {
        let bytes: [UInt8]
        do {
            bytes = try PosixFile.read(path: path, maxSize: maxSize)
        } catch {
            throw LoadError(description: "cannot read signing key \(path): \(error)")
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

/// Whole-file reads through POSIX calls, with `strerror` messages.
enum PosixFile {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func read(path: String, maxSize: Int) throws -> [UInt8] {
        // O_NONBLOCK: opening a FIFO must not hang; regular files ignore it.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw Failure(description: String(cString: strerror(errno))) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw Failure(description: String(cString: strerror(errno))) }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw Failure(description: "not a regular file") }
        guard Int(info.st_size) <= maxSize else { throw Failure(description: "too large (\(info.st_size) bytes)") }
        var out = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw Failure(description: String(cString: strerror(errno)))
            }
            if count == 0 { break }
            out.append(contentsOf: buffer[..<count])
            guard out.count <= maxSize else { throw Failure(description: "too large") }
        }
        return out
    }
}
