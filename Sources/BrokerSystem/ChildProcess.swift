import CSpawn
import Glibc

/// A child process started with `posix_spawn`, which inherits nothing but its three standard streams, and is
/// reaped by a thread of its own the moment it exits.
///
/// Written here rather than with Foundation's `Process` because of what that class does on Linux: it learns
/// of a child's exit through a socket the child holds, and a child spawned at the same moment from another
/// thread can inherit that socket. A long-lived child (a server) then keeps the socket open, and
/// `waitUntilExit` waits for ever on a process that has long been a zombie. Here the child closes every
/// descriptor above 2 before it runs (glibc's `closefrom` spawn action), descriptors of ours are created
/// close-on-exec, and the exit is learnt from `waitid` on the child's own pid, which nothing can hold up.
package final class ChildProcess: @unchecked Sendable {
    /// Where a standard stream of the child comes from or goes to.
    package enum Stream: Sendable {
        /// `/dev/null`.
        case null
        /// This process's own stream.
        case inherit
        /// A file, created 0600 if missing and truncated (stdin: opened for reading).
        case file(String)
        /// A pipe whose other end this process keeps: ``input`` or ``output``/``errors``.
        case pipe
        /// Standard error only: wherever standard output goes.
        case standardOutput
    }

    /// How a child ended.
    package struct Termination: Sendable, Equatable {
        /// The exit code, or the number of the signal that ended it.
        package let status: Int32
        /// Whether a signal ended it.
        package let signaled: Bool

        package init(status: Int32, signaled: Bool) {
            self.status = status
            self.signaled = signaled
        }

        /// As a shell reports it: the exit code, or 128 plus the signal's number.
        package var exitCode: Int32 { signaled ? 128 + status : status }
    }

    /// Why a child could not be started.
    package struct Failure: Error, Sendable, CustomStringConvertible {
        package let description: String
    }

    package let pid: Int32
    /// The write end of the child's stdin, when it is ``Stream/pipe``; ``closeInput()`` closes it.
    package private(set) var input: Int32?
    /// The read ends of the child's stdout and stderr, when they are ``Stream/pipe``. This object closes them
    /// when it goes away.
    package let output: Int32?
    package let errors: Int32?
    private let reaper: Reaper

    /// Starts `executable` (a path, or a name looked up on this process's `PATH`) with `arguments`.
    ///
    /// - Parameters:
    ///   - environment: the child's whole environment; this process's own when `nil`.
    ///   - directory: the child's working directory; this process's own when `nil`.
    package init(
        _ executable: String,
        _ arguments: [String],
        environment: [String: String]? = nil,
        directory: String? = nil,
        stdin: Stream = .null,
        stdout: Stream = .inherit,
        stderr: Stream = .inherit
    ) throws(Failure) {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // Pipe ends of ours, all close-on-exec: (ours, the child's).
        var ends: [(ours: Int32, theirs: Int32)?] = [nil, nil, nil]
        func closeAll() {
            for end in ends {
                if let end {
                    close(end.ours)
                    close(end.theirs)
                }
            }
        }
        for (target, stream) in [(STDIN_FILENO, stdin), (STDOUT_FILENO, stdout), (STDERR_FILENO, stderr)] {
            switch stream {
            case .inherit:
                break
            case .null:
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            case .file(let path):
                let flags = target == 0 ? O_RDONLY : O_WRONLY | O_CREAT | O_TRUNC
                posix_spawn_file_actions_addopen(&actions, target, path, flags, 0o600)
            case .standardOutput:
                posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, target)
            case .pipe:
                var descriptors: [Int32] = [-1, -1]
                guard broker_pipe_cloexec(&descriptors) == 0 else {
                    let reason = String(cString: strerror(errno))
                    closeAll()
                    throw Failure(description: "cannot make a pipe for \(executable): \(reason)")
                }
                // [0] reads, [1] writes: the child reads its stdin and writes its output.
                let pair: (ours: Int32, theirs: Int32) =
                    target == 0 ? (descriptors[1], descriptors[0]) : (descriptors[0], descriptors[1])
                ends[Int(target)] = pair
                posix_spawn_file_actions_adddup2(&actions, pair.theirs, target)
            }
        }
        if let directory { broker_spawn_addchdir(&actions, directory) }
        broker_spawn_addclosefrom(&actions, 3)

        // Signals as a freshly started program expects them: none blocked, none ignored. (This process may ignore
        // some — a signal handled through a dispatch source is ignored first — and both carry over an exec.)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var cArguments = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        var cEnvironment: [UnsafeMutablePointer<CChar>?]? = environment.map { variables in
            variables.map { strdup("\($0.key)=\($0.value)") } + [nil]
        }
        defer { for pointer in cEnvironment ?? [] { free(pointer) } }

        var pid = pid_t()
        let spawned: Int32
        if var cEnvironment {
            spawned =
                executable.contains("/")
                ? posix_spawn(&pid, executable, &actions, &attributes, &cArguments, &cEnvironment)
                : posix_spawnp(&pid, executable, &actions, &attributes, &cArguments, &cEnvironment)
        } else {
            spawned =
                executable.contains("/")
                ? posix_spawn(&pid, executable, &actions, &attributes, &cArguments, environ)
                : posix_spawnp(&pid, executable, &actions, &attributes, &cArguments, environ)
        }
        cEnvironment = nil
        guard spawned == 0 else {
            closeAll()
            throw Failure(description: "cannot start \(executable): \(String(cString: strerror(spawned)))")
        }
        for end in ends { if let end { close(end.theirs) } }
        self.pid = pid
        input = ends[0]?.ours
        output = ends[1]?.ours
        errors = ends[2]?.ours
        reaper = Reaper(pid: pid)
    }

    deinit {
        for descriptor in [input, output, errors] { if let descriptor { close(descriptor) } }
    }

    /// Whether the child has not exited yet.
    package var isRunning: Bool { reaper.termination == nil }

    /// How it ended; `nil` while it runs.
    package var termination: Termination? { reaper.termination }

    /// Sends `signal` unless the child has already been reaped (its pid may then belong to another process).
    package func send(_ signal: Int32) { reaper.send(signal) }

    /// Closes the write end of the child's stdin, which it reads as end of file.
    package func closeInput() {
        if let input { close(input) }
        input = nil
    }

    /// Blocks this thread until the child exits, or until `timeout` has passed (then `nil`). Call it off Swift's
    /// cooperative pool.
    package func waitUntilExit(timeout: Duration? = nil) -> Termination? { reaper.wait(timeout: timeout) }

    /// Reads from ``output`` up to and without the first newline; `nil` at end of file before one.
    package func readOutputLine(limit: Int = 65536) -> String? {
        guard let output else { return nil }
        var line = [UInt8]()
        var byte: UInt8 = 0
        while line.count < limit {
            let count = read(output, &byte, 1)
            if count < 0 && errno == EINTR { continue }
            guard count == 1 else { return nil }
            if byte == UInt8(ascii: "\n") { return String(decoding: line, as: UTF8.self) }
            line.append(byte)
        }
        return String(decoding: line, as: UTF8.self)
    }

    /// Reads ``output`` to its end.
    package func readOutputToEnd() -> [UInt8] {
        guard let output else { return [] }
        var all = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = read(output, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return all }
            all += buffer[0..<count]
        }
    }

    /// Waits for one child on a detached thread; holds the lock for the exit status and for signals, so that
    /// a signal is never sent to a pid that has been reaped (and may have been reused).
    private final class Reaper: @unchecked Sendable {
        private let pid: pid_t
        // Allocated, not stored inline: a pthread object must not move, and `&property` promises no address.
        private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
        private var ended: Termination?

        init(pid: pid_t) {
            self.pid = pid
            pthread_mutex_init(mutex, nil)
            var attributes = pthread_condattr_t()
            pthread_condattr_init(&attributes)
            pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
            pthread_cond_init(condition, &attributes)
            pthread_condattr_destroy(&attributes)
            DetachedThread.start { [self] in watch() }
        }

        deinit {
            pthread_cond_destroy(condition)
            pthread_mutex_destroy(mutex)
            condition.deallocate()
            mutex.deallocate()
        }

        /// Waits for the exit without reaping (`WNOWAIT`), then reaps under the lock.
        private func watch() {
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
            pthread_mutex_lock(mutex)
            var status: Int32 = 0
            var reaped: pid_t
            repeat { reaped = waitpid(pid, &status, 0) } while reaped < 0 && errno == EINTR
            // WIFSIGNALED/WTERMSIG and WEXITSTATUS, which Swift does not import as macros.
            let signal = status & 0x7f
            ended =
                reaped == pid && signal != 0
                ? Termination(status: signal, signaled: true)
                : Termination(status: (status >> 8) & 0xff, signaled: false)
            pthread_cond_broadcast(condition)
            pthread_mutex_unlock(mutex)
        }

        var termination: Termination? {
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return ended
        }

        func send(_ signal: Int32) {
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            if ended == nil { kill(pid, signal) }
        }

        func wait(timeout: Duration?) -> Termination? {
            var deadline = timespec()
            if let timeout {
                clock_gettime(CLOCK_MONOTONIC, &deadline)
                let (seconds, attoseconds) = timeout.components
                let nanoseconds = Int(deadline.tv_nsec) + Int(attoseconds / 1_000_000_000)
                deadline.tv_sec += Int(seconds) + nanoseconds / 1_000_000_000
                deadline.tv_nsec = nanoseconds % 1_000_000_000
            }
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            while ended == nil {
                if timeout == nil {
                    pthread_cond_wait(condition, mutex)
                } else if pthread_cond_timedwait(condition, mutex, &deadline) == ETIMEDOUT {
                    break
                }
            }
            return ended
        }
    }
}
