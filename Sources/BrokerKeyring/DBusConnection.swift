import Glibc
import Synchronization

/// A connection to the D-Bus session bus: a Unix socket, SASL `EXTERNAL` (the kernel vouches for our uid),
/// `Hello`, then method calls that each end by a deadline — a bus or a service that stops answering costs at
/// most the time left, never a hang.
///
/// Synchronous on purpose: the CLI makes a handful of calls per command and the credential store's callers
/// (``BrokerCredentials``' file lock included) are synchronous too; nothing here runs on a server's event loop.
/// One call at a time: a lock serializes them, so a connection may be shared between threads.
package final class DBusConnection: @unchecked Sendable {
    private let exclusive = Mutex<Void>(())
    private var fd: Int32
    private var serial: UInt32 = 0
    private var buffer: [UInt8] = []
    /// Signals that arrived while waiting for a reply, kept for ``waitForSignal(deadline:where:)``.
    private var signals: [DBusMessage] = []
    /// The bus's name for us (`:1.42`).
    package private(set) var uniqueName = ""

    /// The session bus's address: `DBUS_SESSION_BUS_ADDRESS`, else `unix:path=$XDG_RUNTIME_DIR/bus` when that
    /// socket exists (systemd's per-user bus).
    package static func sessionBusAddress(environment: [String: String]) -> String? {
        if let address = environment["DBUS_SESSION_BUS_ADDRESS"], !address.isEmpty { return address }
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
            var status = stat()
            if stat(runtime + "/bus", &status) == 0, status.st_mode & S_IFMT == S_IFSOCK {
                return "unix:path=" + runtime + "/bus"
            }
        }
        return nil
    }

    /// Connects to the first usable Unix-socket address of `address` (`;`-separated, `unix:path=` or
    /// `unix:abstract=`), authenticates and says `Hello`, all by `deadline`.
    package init(address: String, deadline: ContinuousClock.Instant) throws(DBusError) {
        fd = -1
        var problems: [String] = []
        for entry in address.split(separator: ";") {
            guard let target = Self.socketTarget(String(entry)) else {
                problems.append("unsupported address \"\(entry.prefix(80))\"")
                continue
            }
            do {
                fd = try Self.connect(target, deadline: deadline)
                break
            } catch {
                problems.append(error.description)
            }
        }
        guard fd >= 0 else {
            throw .unreachable(problems.isEmpty ? "no address" : problems.joined(separator: "; "))
        }
        do {
            try authenticate(deadline: deadline)
            let reply = try call(
                .call(
                    destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                    interface: "org.freedesktop.DBus", member: "Hello"), deadline: deadline)
            uniqueName = reply.first?.stringValue ?? ""
        } catch {
            close(fd)
            fd = -1
            throw error
        }
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    // MARK: Addresses and the socket

    enum SocketTarget: Equatable {
        case path(String)
        case abstract(String)
    }

    /// `unix:path=/run/user/1000/bus,guid=…` → the socket; other transports are not ours to speak.
    static func socketTarget(_ address: String) -> SocketTarget? {
        guard address.hasPrefix("unix:") else { return nil }
        for pair in address.dropFirst(5).split(separator: ",") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, let value = unescape(String(parts[1])) else { continue }
            switch parts[0] {
            case "path": return .path(value)
            case "abstract": return .abstract(value)
            default: continue
            }
        }
        return nil
    }

    /// D-Bus address values escape bytes as `%XX`.
    static func unescape(_ text: String) -> String? {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next(), let low = iterator.next(),
                    let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
                else { return nil }
                bytes.append(value)
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func connect(_ target: SocketTarget, deadline: ContinuousClock.Instant) throws(DBusError) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let name: [UInt8]
        switch target {
        case .path(let path): name = Array(path.utf8) + [0]
        case .abstract(let text): name = [0] + Array(text.utf8)
        }
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard name.count <= capacity else { throw .unreachable("the socket name is too long") }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in name.enumerated() { raw[index] = byte }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + name.count)
        let socketFD = socket(
            AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard socketFD >= 0 else { throw .unreachable("socket: \(String(cString: strerror(errno)))") }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socketFD, $0, length) }
        }
        if result != 0 && errno != EINPROGRESS && errno != EAGAIN {
            let reason = String(cString: strerror(errno))
            close(socketFD)
            throw .unreachable("\(target.shown): \(reason)")
        }
        if result != 0 {
            do {
                try wait(socketFD, for: Int16(POLLOUT), deadline: deadline, what: "connecting")
            } catch {
                close(socketFD)
                throw error
            }
            var failure: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(socketFD, SOL_SOCKET, SO_ERROR, &failure, &size)
            if failure != 0 {
                close(socketFD)
                throw .unreachable("\(target.shown): \(String(cString: strerror(failure)))")
            }
        }
        return socketFD
    }

    /// Waits until `fd` is ready for `events`, or throws when `deadline` passes.
    private static func wait(
        _ fd: Int32, for events: Int16, deadline: ContinuousClock.Instant, what: String
    ) throws(DBusError) {
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { throw .timedOut(what) }
            let milliseconds = Int32(
                clamping: left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1)
            var entry = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&entry, 1, milliseconds)
            if ready < 0 {
                if errno == EINTR { continue }
                throw .unreachable("poll: \(String(cString: strerror(errno)))")
            }
            if ready == 0 { continue }
            if entry.revents & Int16(POLLNVAL) != 0 { throw .closed }
            return
        }
    }

    private func send(_ bytes: [UInt8], deadline: ContinuousClock.Instant, what: String) throws(DBusError) {
        var sent = 0
        while sent < bytes.count {
            let written = bytes[sent...].withUnsafeBytes { raw in
                Glibc.send(fd, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL))
            }
            if written > 0 {
                sent += written
                continue
            }
            if written < 0 && (errno == EAGAIN || errno == EINTR) {
                try Self.wait(fd, for: Int16(POLLOUT), deadline: deadline, what: what)
                continue
            }
            throw errno == EPIPE || errno == ECONNRESET
                ? .closed : .unreachable("send: \(String(cString: strerror(errno)))")
        }
    }

    /// Reads more bytes into the buffer (at least one), by `deadline`.
    private func receive(deadline: ContinuousClock.Instant, what: String) throws(DBusError) {
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                buffer.append(contentsOf: chunk[0..<count])
                return
            }
            if count == 0 { throw .closed }
            if errno == EAGAIN || errno == EINTR {
                try Self.wait(fd, for: Int16(POLLIN), deadline: deadline, what: what)
                continue
            }
            throw errno == ECONNRESET ? .closed : .unreachable("recv: \(String(cString: strerror(errno)))")
        }
    }

    // MARK: Authentication

    /// SASL `EXTERNAL` with our uid, as the specification's "Authentication Protocol" describes.
    private func authenticate(deadline: ContinuousClock.Instant) throws(DBusError) {
        let uid = Array(String(getuid()).utf8).map { byte in
            let digits = Array("0123456789abcdef".utf8)
            return String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 0xF)]], as: UTF8.self)
        }.joined()
        try send([0] + Array("AUTH EXTERNAL \(uid)\r\n".utf8), deadline: deadline, what: "authenticating")
        let line = try readLine(deadline: deadline)
        guard line.hasPrefix("OK ") else {
            throw .unreachable("the bus refused authentication (\(line.prefix(80)))")
        }
        try send(Array("BEGIN\r\n".utf8), deadline: deadline, what: "authenticating")
    }

    private func readLine(deadline: ContinuousClock.Instant) throws(DBusError) -> String {
        while true {
            if let end = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = buffer[..<end]
                buffer.removeSubrange(...end)
                return String(decoding: line, as: UTF8.self).trimmingSuffix("\r")
            }
            guard buffer.count < 4096 else { throw .unreachable("an authentication line longer than 4 KiB") }
            try receive(deadline: deadline, what: "authenticating")
        }
    }

    // MARK: Messages

    /// The next whole message from the bus.
    private func nextMessage(deadline: ContinuousClock.Instant, what: String) throws(DBusError) -> DBusMessage {
        while true {
            if buffer.count >= 16 {
                let length = try DBusMessage.length(prefix: buffer[0..<16])
                if buffer.count >= length {
                    let bytes = Array(buffer[0..<length])
                    buffer.removeSubrange(0..<length)
                    return try DBusMessage.decode(bytes)
                }
            }
            try receive(deadline: deadline, what: what)
        }
    }

    /// Sends `message` and returns its reply's body; a D-Bus error reply is thrown as ``DBusError/remote``.
    @discardableResult
    package func call(_ message: DBusMessage, deadline: ContinuousClock.Instant) throws(DBusError) -> [DBusValue] {
        try exclusive.withLock { _ throws(DBusError) in try exchange(message, deadline: deadline) }
    }

    private func exchange(_ message: DBusMessage, deadline: ContinuousClock.Instant) throws(DBusError) -> [DBusValue] {
        var outgoing = message
        serial &+= 1
        if serial == 0 { serial = 1 }
        outgoing.serial = serial
        let what = "\(message.interface ?? "").\(message.member ?? "")"
        try send(try outgoing.encode(), deadline: deadline, what: what)
        while true {
            let incoming = try nextMessage(deadline: deadline, what: what)
            switch incoming.kind {
            case .methodReturn where incoming.replySerial == outgoing.serial:
                return incoming.body
            case .error where incoming.replySerial == outgoing.serial:
                throw .remote(name: incoming.errorName ?? "error", message: incoming.body.first?.stringValue ?? "")
            case .signal:
                if signals.count < 64 { signals.append(incoming) }
            default:
                continue  // Calls to us and stray replies: nothing here answers them.
            }
        }
    }

    /// The first signal that `matches` (one that came earlier counts), by `deadline`.
    package func waitForSignal(
        deadline: ContinuousClock.Instant, where matches: (DBusMessage) -> Bool
    ) throws(DBusError) -> DBusMessage {
        try exclusive.withLock { _ throws(DBusError) in try awaitSignal(deadline: deadline, where: matches) }
    }

    private func awaitSignal(
        deadline: ContinuousClock.Instant, where matches: (DBusMessage) -> Bool
    ) throws(DBusError) -> DBusMessage {
        if let index = signals.firstIndex(where: matches) { return signals.remove(at: index) }
        while true {
            let incoming = try nextMessage(deadline: deadline, what: "waiting for a signal")
            if incoming.kind == .signal && matches(incoming) { return incoming }
        }
    }
}

extension DBusConnection.SocketTarget {
    var shown: String {
        switch self {
        case .path(let path): path
        case .abstract(let name): "@" + name
        }
    }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
    }
}
