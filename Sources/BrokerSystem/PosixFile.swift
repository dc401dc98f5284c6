// Modes are `UInt32` (Linux's mode_t) in this file's package API: with Glibc's type name there, the import had
// to be `package`, and whether the compiler then credits Glibc with the type varied between fresh builds (an
// unused-import warning — an error here — in some).
import Glibc

/// Files that hold secrets or shared state, through POSIX calls with `strerror` messages.
///
/// Written against POSIX rather than `FileManager` because every step matters here: the mode a file is
/// created with (never a window where it is world-readable), `fsync` before `rename`, `flock`, and refusing
/// FIFOs and devices where a regular file is expected.
package enum PosixFile {
    /// A failed file operation: what was attempted, on which path, and the system's reason.
    package struct Failure: Error, Sendable, CustomStringConvertible {
        package let path: String
        package let reason: String

        package init(path: String, reason: String) {
            self.path = path
            self.reason = reason
        }

        package var description: String { "\(path): \(reason)" }
    }

    static func systemReason() -> String { String(cString: strerror(errno)) }

    /// Reads a whole regular file of at most `maxSize` bytes.
    package static func read(path: String, maxSize: Int) throws(Failure) -> [UInt8] {
        // O_NONBLOCK: opening a FIFO must not hang; regular files ignore it.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw Failure(path: path, reason: systemReason()) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw Failure(path: path, reason: systemReason()) }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw Failure(path: path, reason: "not a regular file") }
        guard Int(info.st_size) <= maxSize else {
            throw Failure(path: path, reason: "too large (\(info.st_size) bytes, at most \(maxSize))")
        }
        let out = try readAll(descriptor: fd, name: path, limit: maxSize)
        guard out.count <= maxSize else { throw Failure(path: path, reason: "too large (at most \(maxSize))") }
        return out
    }

    /// What `descriptor` yields until end of input, reading no more than `limit + 1` bytes: a result longer than
    /// `limit` means there was more (the caller says what that means). `name` is for the error.
    package static func readAll(descriptor: Int32, name: String, limit: Int) throws(Failure) -> [UInt8] {
        var out = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while out.count <= limit {
            let wanted = min(buffer.count, limit + 1 - out.count)
            let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, wanted) }
            if count < 0 {
                if errno == EINTR { continue }
                throw Failure(path: name, reason: systemReason())
            }
            if count == 0 { break }
            out.append(contentsOf: buffer[..<count])
        }
        return out
    }

    /// Writes all of `bytes` to `descriptor` (retrying short writes and EINTR); `false` when a write failed.
    @discardableResult
    package static func writeAll(_ bytes: [UInt8], to descriptor: Int32) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            if written <= 0 { return false }
            offset += written
        }
        return true
    }

    /// A secret kept in a file of its own (a password, a token): the file's text without its trailing line
    /// breaks; an empty one is an error.
    package static func readSecret(path: String) throws(Failure) -> String {
        var text = String(decoding: try read(path: path, maxSize: 4096), as: UTF8.self)
        while let last = text.unicodeScalars.last, last == "\n" || last == "\r" { text.unicodeScalars.removeLast() }
        guard !text.isEmpty else { throw Failure(path: path, reason: "the file is empty") }
        return text
    }

    /// Whether something exists at `path` (without following a final symlink).
    package static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    /// Modification time of `path` in nanoseconds since the epoch, or `nil` when it does not exist.
    package static func modificationTime(_ path: String) -> Int64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
    }

    /// The permission bits of `path`, or `nil` when it does not exist.
    package static func mode(_ path: String) -> UInt32? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return info.st_mode & 0o7777
    }

    /// Makes `path` a directory private to this user (0700), creating missing parents with the same mode.
    ///
    /// It must be ours: one that others can read or write is tightened to 0700 through its descriptor (never by
    /// name), and one owned by someone else is refused — secrets are about to be written into it. With
    /// `followingLink: false` (a folder broker makes inside one the user named, such as `keys`) the directory is
    /// opened without following a link (RT3-11): one planted as a symbolic link is refused, never followed, and
    /// its target never chmod'ed. A folder the user named (`BROKER_HOME`, `data_dir`) may be reached through a
    /// link of theirs.
    package static func ensurePrivateDirectory(_ path: String, followingLink: Bool = true) throws(Failure) {
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, 0o700) != 0 && errno != EEXIST {
                throw Failure(path: prefix, reason: systemReason())
            }
        }
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (followingLink ? 0 : O_NOFOLLOW))
        guard fd >= 0 else {
            let code = errno
            let reason = systemReason()
            var link = stat()
            // O_DIRECTORY with O_NOFOLLOW answers a link with ENOTDIR (or ELOOP): say which it was.
            if code == ENOTDIR || code == ELOOP, lstat(path, &link) == 0, (link.st_mode & S_IFMT) == S_IFLNK {
                throw Failure(path: path, reason: "is a symbolic link; broker keeps its secrets only in a real folder")
            }
            throw Failure(path: path, reason: code == ENOTDIR ? "not a directory" : reason)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw Failure(path: path, reason: systemReason()) }
        guard info.st_uid == geteuid() else {
            throw Failure(
                path: path,
                reason: "belongs to another user (uid \(info.st_uid)); broker keeps its secrets only in "
                    + "a folder of its own user")
        }
        if info.st_mode & 0o077 != 0 {
            guard fchmod(fd, 0o700) == 0 else { throw Failure(path: path, reason: systemReason()) }
        }
    }

    /// ``ensurePrivateDirectory(_:followingLink:)`` for `home`, then for `child` beneath it, never through a
    /// link: the home is checked before anything is made or written inside it (RT3-11).
    package static func ensurePrivateDirectory(_ child: String, beneath home: String) throws(Failure) {
        try ensurePrivateDirectory(home)
        try ensurePrivateDirectory(child, followingLink: false)
    }

    /// Replaces `path` atomically with `bytes`: a temporary file in the same directory, created with `mode`,
    /// written, `fsync`ed, renamed over `path`, and the directory `fsync`ed.
    ///
    /// A reader sees the old content or the new one, never a mix, and a crash at any moment leaves one of
    /// the two on disk.
    package static func writeAtomically(_ bytes: [UInt8], to path: String, mode: UInt32 = 0o600) throws(Failure) {
        let directory = parentDirectory(of: path)
        let random = (0..<4).map { _ in String(UInt32.random(in: 0...UInt32.max), radix: 36) }.joined()
        let temporary = "\(path).tmp-\(getpid())-\(random)"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode)
        guard fd >= 0 else { throw Failure(path: temporary, reason: systemReason()) }
        var ok = false
        defer {
            if !ok { unlink(temporary) }
        }
        do {
            defer { close(fd) }
            // The umask may have narrowed the mode; never widened it, but make it exact.
            guard fchmod(fd, mode) == 0 else { throw Failure(path: temporary, reason: systemReason()) }
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeBytes { buffer in
                    buffer.baseAddress.map { write(fd, $0 + offset, buffer.count - offset) } ?? 0
                }
                if written < 0 {
                    if errno == EINTR { continue }
                    throw Failure(path: temporary, reason: systemReason())
                }
                offset += written
            }
            guard fsync(fd) == 0 else { throw Failure(path: temporary, reason: systemReason()) }
        }
        guard rename(temporary, path) == 0 else { throw Failure(path: path, reason: systemReason()) }
        ok = true
        let dirFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dirFD >= 0 {
            _ = fsync(dirFD)
            close(dirFD)
        }
    }

    /// Creates `path` empty with `mode` if it does not exist yet (so that a library opening it later
    /// cannot create it with wider permissions).
    package static func createIfMissing(_ path: String, mode: UInt32 = 0o600) throws(Failure) {
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode)
        guard fd >= 0 else { throw Failure(path: path, reason: systemReason()) }
        close(fd)
    }

    /// Renames `path` aside to `path.<suffix>` and returns the new path.
    package static func moveAside(_ path: String, suffix: String) throws(Failure) -> String {
        let target = "\(path).\(suffix)"
        guard rename(path, target) == 0 else { throw Failure(path: path, reason: systemReason()) }
        return target
    }

    /// The directory part of `path` (`.` when there is none).
    package static func parentDirectory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let parent = String(path[..<slash])
        return parent.isEmpty ? "/" : parent
    }

    /// Expands a leading `~/` with `$HOME`.
    package static func expandingTilde(_ path: String) -> String {
        guard path == "~" || path.hasPrefix("~/") else { return path }
        let home = getenv("HOME").map { String(cString: $0) } ?? ""
        return home + path.dropFirst()
    }
}
