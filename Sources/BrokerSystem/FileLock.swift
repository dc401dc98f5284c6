import Glibc

/// An exclusive advisory lock (`flock`) on a lock file, held until ``unlock()`` or deinit.
///
/// `flock` locks belong to the open file description, so they exclude other processes and other opens in
/// this process alike, and the kernel drops them when a process dies — a crashed holder never wedges others.
package final class FileLock {
    private var fd: Int32
    package let path: String

    /// Opens (creating, 0600) `path` and waits for the exclusive lock.
    package init(path: String) throws(PosixFile.Failure) {
        self.path = path
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw PosixFile.Failure(path: path, reason: PosixFile.systemReason()) }
        while flock(fd, LOCK_EX) != 0 {
            if errno == EINTR { continue }
            let reason = PosixFile.systemReason()
            close(fd)
            throw PosixFile.Failure(path: path, reason: reason)
        }
    }

    private init(path: String, fd: Int32) {
        self.path = path
        self.fd = fd
    }

    /// The lock if it is free now, else `nil` (another holder has it); the file is created 0600.
    package static func attempt(path: String) throws(PosixFile.Failure) -> FileLock? {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw PosixFile.Failure(path: path, reason: PosixFile.systemReason()) }
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            if errno == EINTR { continue }
            let busy = errno == EWOULDBLOCK
            let reason = PosixFile.systemReason()
            close(fd)
            if busy { return nil }
            throw PosixFile.Failure(path: path, reason: reason)
        }
        return FileLock(path: path, fd: fd)
    }

    package func unlock() {
        guard fd >= 0 else { return }
        flock(fd, LOCK_UN)
        close(fd)
        fd = -1
    }

    deinit { unlock() }
}
