import BrokerCore
import BrokerHTTP
package import BrokerSystem
import BrokerTesting
package import Foundation
import Google
import Testing

/// Debian's nginx on a free loopback port, round robin over `upstreams` (no sticky sessions), with an access
/// log that names the upstream each request went to.
package final class NginxProcess: @unchecked Sendable {
    package private(set) var process: ChildProcess!
    package let directory: URL
    package let url: String
    package var accessLog: String { directory.appendingPathComponent("access.log").path }

    package init(upstreams: [String], port: Int) throws {
        directory = try TemporaryDirectory.make(prefix: "broker-nginx")
        url = "http://127.0.0.1:\(port)"
        let path = directory.path
        let servers = upstreams.map { "    server \($0.replacingOccurrences(of: "http://", with: ""));" }
        // As root, nginx's workers would otherwise switch to `nobody`, who cannot write the temporary folders.
        let user = getuid() == 0 ? "user root;\n" : ""
        let config = """
            \(user)daemon off;
            worker_processes 1;
            pid \(path)/nginx.pid;
            error_log \(path)/error.log warn;
            events { worker_connections 256; }
            http {
              log_format upstream '$request_method $uri $status $upstream_addr';
              access_log \(path)/access.log upstream;
              client_body_temp_path \(path)/body;
              proxy_temp_path \(path)/proxy;
              fastcgi_temp_path \(path)/fastcgi;
              uwsgi_temp_path \(path)/uwsgi;
              scgi_temp_path \(path)/scgi;
              upstream brokers {
            \(servers.joined(separator: "\n"))
                keepalive 8;
              }
              server {
                listen 127.0.0.1:\(port);
                location / {
                  proxy_pass http://brokers;
                  proxy_http_version 1.1;
                  proxy_set_header Connection "";
                  proxy_set_header Host $http_host;
                  proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
                  proxy_set_header X-Forwarded-Proto $scheme;
                }
              }
            }

            """
        let file = directory.appendingPathComponent("nginx.conf")
        try Data(config.utf8).write(to: file)
        let errors = directory.appendingPathComponent("stderr.log")
        process = try ChildProcess(
            "/usr/sbin/nginx", ["-p", path, "-c", file.path], stdin: .null, stdout: .null, stderr: .file(errors.path))
    }

    /// The access log: (method, path, status, upstream address) per request.
    package func requests() -> [(method: String, path: String, status: Int, upstream: String)] {
        let text = (try? String(contentsOfFile: accessLog, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ").map(String.init)
            guard fields.count == 4, let status = Int(fields[2]) else { return nil }
            return (fields[0], fields[1], status, fields[3])
        }
    }

    /// SIGTERM: nginx's fast shutdown, in which the master tells its workers to exit at once. (SIGKILL would
    /// leave the workers running without a master; SIGQUIT waits for keep-alive connections.)
    package func stop() {
        process.send(SIGTERM)
    }

    deinit { stop() }
}

/// A free TCP port for a program the test starts to listen on (bound and released), below the kernel's
/// ephemeral range (32768–60999): a port the kernel handed out for binding to port 0 is also the next local port
/// of some outgoing connection, and on a busy run one took it between the release and the program's own bind
/// ("Address already in use"). Ports in 20000–32767 are taken only by someone who chose them.
package func freeLoopbackPort() throws -> Int {
    try freePort(in: 20_000..<32_768)
}

/// A port held for a program the test is about to start on it: bound on every address with `SO_REUSEADDR` and
/// not listening, until ``release()``. The program (broker serve: Hummingbird binds with `SO_REUSEADDR` too) can
/// bind and listen on it meanwhile, and nobody else can — ``freePort(in:)``'s probe of another test included.
/// Before, a port chosen for a `localhost` issuer was released before the broker bound it, and another test's
/// program took it in between ("Address already in use"); the test then retried other ports.
package final class ReservedPort: @unchecked Sendable {
    package let port: Int
    private var descriptor: Int32

    init(port: Int, descriptor: Int32) {
        self.port = port
        self.descriptor = descriptor
    }

    /// Lets the port go (once the program listens on it, or when the test gives up).
    package func release() {
        if descriptor >= 0 { close(descriptor) }
        descriptor = -1
    }

    deinit { release() }
}

/// A port below the kernel's ephemeral range, held until the program that will listen on it has started.
package func reserveLoopbackPort() throws -> ReservedPort {
    for _ in 0..<200 {
        let port = Int.random(in: 20_000..<32_768)
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw ServerTestError("socket: \(errno)") }
        var one: Int32 = 1
        guard setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size)) == 0 else {
            close(descriptor)
            throw ServerTestError("setsockopt: \(errno)")
        }
        var address = loopbackAddress(port: port, host: "0.0.0.0")
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        if bound == 0 { return ReservedPort(port: port, descriptor: descriptor) }
        close(descriptor)
    }
    throw ServerTestError("no free port to reserve")
}

/// A free TCP port in `range` on every address (bound on 0.0.0.0 and released): for programs that take only
/// registered ports (oidc-agent: 1024–49151), where the kernel's ephemeral ports fall outside.
package func freePort(in range: Range<Int>) throws -> Int {
    for _ in 0..<200 {
        let port = Int.random(in: range)
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw ServerTestError("socket: \(errno)") }
        defer { close(descriptor) }
        var address = loopbackAddress(port: port, host: "0.0.0.0")
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        if bound == 0 { return port }
    }
    throw ServerTestError("no free port in \(range)")
}

/// 127.0.0.1:`port` as a socket address.
package func loopbackAddress(port: Int, host: String = "127.0.0.1") -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr(host)
    address.sin_port = UInt16(port).bigEndian
    return address
}

/// A TCP connection to 127.0.0.1:`port` (from `source`, another loopback address, when given), started
/// without waiting for it to be accepted.
package func connectWithoutWaiting(port: Int, from source: String? = nil) throws -> Int32 {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
    guard descriptor >= 0 else { throw ServerTestError("socket: \(errno)") }
    if let source {
        var local = loopbackAddress(port: 0, host: source)
        let bound = withUnsafePointer(to: &local) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else {
            let failure = errno
            close(descriptor)
            throw ServerTestError("bind \(source): \(failure)")
        }
    }
    var address = loopbackAddress(port: port)
    let started = withUnsafePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard started == 0 || errno == EINPROGRESS else {
        let failure = errno
        close(descriptor)
        throw ServerTestError("connect: \(failure)")
    }
    return descriptor
}

/// A TCP socket bound to a free port on 127.0.0.1, listening when `backlog` is given; the caller closes it.
package func loopbackSocket(backlog: Int32? = nil) throws -> (descriptor: Int32, port: Int) {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { throw ServerTestError("socket: \(errno)") }
    var address = loopbackAddress(port: 0)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
            bind(descriptor, socketAddress, length) == 0 && getsockname(descriptor, socketAddress, &length) == 0
        }
    }
    let listening = backlog.map { listen(descriptor, $0) == 0 } ?? true
    guard bound, listening else {
        let failure = errno
        close(descriptor)
        throw ServerTestError("bind/listen on 127.0.0.1: \(failure)")
    }
    return (descriptor, Int(UInt16(bigEndian: address.sin_port)))
}
