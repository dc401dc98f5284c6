import BrokerCore
import Glibc

/// The CLI's side of the loopback redirect (RFC 8252 §7.3): a listener on 127.0.0.1 and an ephemeral port
/// that waits for exactly one `GET /callback?…`.
///
/// Browsers open speculative connections and leave them idle, so no single connection may block the others:
/// one thread polls the listening socket and every open connection together, reads each request up to its
/// header end (16 KiB at most), answers every path but `/callback` with 404, and hands the first callback to
/// the caller with its connection still open, so that the page it sends can say how the sign-in ended.
/// The listener binds 127.0.0.1 only and is closed as soon as the callback has come (or on timeout).
package final class LoopbackListener: @unchecked Sendable {
    package let port: Int
    private let socket: Int32

    package enum Failure: Error, CustomStringConvertible {
        case system(String)
        case timedOut

        package var description: String {
            switch self {
            case .system(let why): why
            case .timedOut: "no answer from the browser in time"
            }
        }
    }

    /// Something that can be told how the sign-in ended (the browser's connection, or nobody).
    package protocol Answerable: Sendable {
        func respond(status: Int, title: String, message: String)
    }

    /// The callback request: its query parameters and the connection to answer on.
    package struct Callback: Answerable, @unchecked Sendable {
        package let query: [String: String]
        let connection: Int32

        /// Sends an HTML page (no-store) and closes the connection.
        package func respond(status: Int, title: String, message: String) {
            let html = LoopbackListener.page(title: title, message: message, success: status == 200)
            let body = Array(html.utf8)
            let reason = status == 200 ? "OK" : "Bad Request"
            let head =
                "HTTP/1.1 \(status) \(reason)\r\nContent-Type: text/html; charset=utf-8\r\n"
                + "Content-Length: \(body.count)\r\nCache-Control: no-store\r\nConnection: close\r\n"
                + "X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n\r\n"
            LoopbackListener.sendAll(connection, Array(head.utf8) + body)
            close(connection)
        }
    }

    package init() throws(Failure) {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .system("cannot create a socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw .system("cannot listen on 127.0.0.1: \(reason)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        socket = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(socket) }

    /// Waits (blocking this thread) at most `timeout` seconds for `GET /callback` whose query `belongs`
    /// accepts. Any other callback (a stray request, a guess at the port) is answered 400 and waited past.
    package func waitForCallback(timeout: Double, belongs: ([String: String]) -> Bool = { _ in true }) throws(Failure)
        -> Callback
    {
        let deadline = Self.monotonic() + timeout
        var buffers: [Int32: [UInt8]] = [:]
        defer {
            for (fd, _) in buffers { close(fd) }
        }
        while true {
            let left = deadline - Self.monotonic()
            if left <= 0 { throw .timedOut }
            var fds = [pollfd(fd: socket, events: Int16(POLLIN), revents: 0)]
            fds += buffers.keys.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&fds, nfds_t(fds.count), Int32(min(left, 1) * 1000))
            if ready < 0 {
                if errno == EINTR { continue }
                throw .system("poll: \(String(cString: strerror(errno)))")
            }
            for entry in fds where entry.revents != 0 {
                if entry.fd == socket {
                    let connection = accept(socket, nil, nil)
                    if connection >= 0 {
                        _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
                        buffers[connection] = []
                    }
                    continue
                }
                var chunk = [UInt8](repeating: 0, count: 4096)
                let count = read(entry.fd, &chunk, chunk.count)
                if count <= 0 {
                    close(entry.fd)
                    buffers[entry.fd] = nil
                    continue
                }
                buffers[entry.fd, default: []].append(contentsOf: chunk[..<count])
                let query: [String: String]
                switch Self.examine(buffers[entry.fd] ?? []) {
                case .incomplete:
                    continue
                case .refused(let status):
                    buffers[entry.fd] = nil
                    Self.reply(entry.fd, status: status)
                    continue
                case .callback(let parameters):
                    buffers[entry.fd] = nil
                    query = parameters
                }
                guard belongs(query) else {
                    Self.reply(entry.fd, status: "400 Bad Request")
                    continue
                }
                return Callback(query: query, connection: entry.fd)
            }
        }
    }

    /// What the bytes read so far from one connection ask of the listener.
    package enum RequestHead: Equatable, Sendable {
        /// No header end yet (and under the size limit): keep reading.
        case incomplete
        /// Answer with this status line and close.
        case refused(String)
        /// `GET /callback` with these query parameters (the first of each name).
        case callback([String: String])
    }

    /// Largest request head read before answering 431.
    static let maxHeadBytes = 16 * 1024

    /// Reads a request head: only `GET /callback?…` with a well-formed query is a callback; anything else is
    /// refused with the status to answer. Pure, so that it can be fuzzed (`Fuzz/loopback`).
    package static func examine(_ bytes: [UInt8]) -> RequestHead {
        guard let end = headerEnd(bytes) else {
            return bytes.count > maxHeadBytes ? .refused("431 Request Header Fields Too Large") : .incomplete
        }
        let line = String(decoding: bytes[..<end].prefix { $0 != 0x0D && $0 != 0x0A }, as: UTF8.self)
        // RFC 9112 §3: method SP request-target SP HTTP-version, single spaces.
        let parts = line.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[2].utf8.starts(with: "HTTP/1.".utf8), !parts[1].isEmpty else {
            return .refused("400 Bad Request")
        }
        guard parts[0] == "GET" else { return .refused("405 Method Not Allowed") }
        let target = parts[1]
        guard target.prefix(while: { $0 != "?" }) == "/callback" else { return .refused("404 Not Found") }
        var query: [String: String] = [:]
        if let mark = target.firstIndex(of: "?") {
            guard let pairs = FormEncoding.decode(String(target[target.index(after: mark)...])) else {
                return .refused("400 Bad Request")
            }
            for (name, value) in pairs where query[name] == nil { query[name] = value }
        }
        return .callback(query)
    }

    static func headerEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 0...(bytes.count - 4)
        where bytes[index] == 0x0D && bytes[index + 1] == 0x0A && bytes[index + 2] == 0x0D && bytes[index + 3] == 0x0A {
            return index
        }
        return nil
    }

    static func reply(_ fd: Int32, status: String) {
        let text = "HTTP/1.1 \(status)\r\nContent-Length: 0\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
        sendAll(fd, Array(text.utf8))
        close(fd)
    }

    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent < 0 && errno == EINTR { continue }
            if sent <= 0 { return }
            offset += sent
        }
    }

    static func monotonic() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    /// A small page in the broker's pages' look; every text in it is HTML-escaped (it may come from the
    /// provider or the URL).
    package static func page(title: String, message: String, success: Bool) -> String {
        HTML.document(
            title: title,
            body: "<p>\(HTML.escape(message))</p>\n<p class=\"muted\">You can close this tab.</p>",
            tone: success ? .success : .failure)
    }

}
