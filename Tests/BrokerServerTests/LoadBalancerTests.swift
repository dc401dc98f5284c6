import BrokerCore
import BrokerHTTP
import BrokerSystem
import BrokerTesting
import Foundation
import Google
import Testing

/// Debian's nginx on a free loopback port, round robin over `upstreams` (no sticky sessions), with an access
/// log that names the upstream each request went to.
final class NginxProcess: @unchecked Sendable {
    private(set) var process: ChildProcess!
    let directory: URL
    let url: String
    var accessLog: String { directory.appendingPathComponent("access.log").path }

    init(upstreams: [String], port: Int) throws {
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
    func requests() -> [(method: String, path: String, status: Int, upstream: String)] {
        let text = (try? String(contentsOfFile: accessLog, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ").map(String.init)
            guard fields.count == 4, let status = Int(fields[2]) else { return nil }
            return (fields[0], fields[1], status, fields[3])
        }
    }

    /// SIGTERM: nginx's fast shutdown, in which the master tells its workers to exit at once. (SIGKILL would
    /// leave the workers running without a master; SIGQUIT waits for keep-alive connections.)
    func stop() {
        process.send(SIGTERM)
    }

    deinit { stop() }
}

/// A free TCP port on 127.0.0.1 (bound and released; the caller retries if someone takes it meanwhile).
func freeLoopbackPort() throws -> Int {
    let (descriptor, port) = try loopbackSocket()
    close(descriptor)
    return port
}

/// A free TCP port in `range` on every address (bound on 0.0.0.0 and released): for programs that take only
/// registered ports (oidc-agent: 1024–49151), where the kernel's ephemeral ports fall outside.
func freePort(in range: Range<Int>) throws -> Int {
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
func loopbackAddress(port: Int, host: String = "127.0.0.1") -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr(host)
    address.sin_port = UInt16(port).bigEndian
    return address
}

/// A TCP socket bound to a free port on 127.0.0.1, listening when `backlog` is given; the caller closes it.
func loopbackSocket(backlog: Int32? = nil) throws -> (descriptor: Int32, port: Int) {
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

@Suite("two brokers behind nginx (round robin, no sticky sessions)")
struct LoadBalancerTests {
    @Test func theCLISignsInRefreshesAndLogsOutThroughNginx() async throws {
        let emulator = try await EmulatorProcess.start()
        let shared = try await ScaleOutProcessTests.Shared.make()
        // The brokers' issuer is the balancer's address: tokens, redirects and the provider's callback all
        // name it. Its port is chosen first, so nginx is started on it after the brokers.
        var nginx: NginxProcess?
        var brokers: [BrokerProcess] = []
        for _ in 0..<5 where nginx == nil {
            let port = try freeLoopbackPort()
            let issuer = "http://127.0.0.1:\(port)"
            brokers = [
                try await shared.serve(config: emulator.googleOnlyConfig, issuer: issuer),
                try await shared.serve(config: emulator.googleOnlyConfig, issuer: issuer),
            ]
            do {
                nginx = try NginxProcess(upstreams: brokers.map(\.url), port: port)
                try await Self.awaitReady(try #require(nginx))
            } catch {
                nginx?.stop()
                nginx = nil
                brokers.forEach { $0.stop() }
            }
        }
        let balancer = try #require(nginx, "nginx started on a free port")
        defer {
            balancer.stop()
            brokers.forEach { $0.stop() }
        }
        let client = try ClientHome(url: balancer.url)

        // The custom account: register, log out, log in, token, refresh, logout.
        try await client.register("ada@example.com")
        #expect(try await client.run(["logout"]).status == 0)
        let login = try await client.run(
            ["login", "--provider", "custom", "--email", "ada@example.com", "--password-stdin"],
            stdin: "correct horse battery staple\n")
        #expect(login.status == 0, "\(login.stderr)")
        let first = try #require(try client.cached())
        let token = try await client.run(["token"])
        #expect(token.status == 0 && token.stdout == first.accessToken.exposed + "\n")
        try client.ageSession()
        let refreshed = try await client.run(["token", "--min-valid", "7200"])
        #expect(refreshed.status == 0, "\(refreshed.stderr)")
        let second = try #require(try client.cached())
        #expect(second.refreshToken != first.refreshToken, "rotated through the balancer")
        let whoami = try await client.run(["whoami"])
        #expect(whoami.status == 0 && whoami.stdout.contains("ada@example.com"), "\(whoami.stdout)")
        // Each broker accepts the other's tokens.
        for broker in brokers { #expect(try await broker.me(second.accessToken.exposed, heldBy: client).status == 200) }
        #expect(try await client.run(["logout"]).status == 0)
        for broker in brokers {
            let replay = try await broker.form(
                "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", second.refreshToken!.exposed)])
            #expect(replay.status == 400, "logout through one broker ended the session at both")
        }

        // Google through the emulator: the loopback flow's /start and /callback go to different brokers.
        let (result, browser) = try await CLIBrowserLoginTests.login(client)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(browser?["page_status"]?.intValue == 200)
        let google = try #require(try client.cached())
        #expect(google.provider == Google.id && google.userID.description.hasPrefix("google:"))
        let log = balancer.requests()
        let start = try #require(log.last { $0.path == "/auth/google/start" })
        let callback = try #require(log.last { $0.path == "/auth/google/callback" })
        #expect(start.status == 302 && callback.status == 302)
        #expect(start.upstream != callback.upstream, "start at one broker, callback at the other: \(log)")
        try client.ageSession()
        let googleRefresh = try await client.run(["token", "--min-valid", "7200"])
        #expect(googleRefresh.status == 0, "\(googleRefresh.stderr)")
        #expect(try client.cached()?.refreshToken != google.refreshToken)
        #expect(try await client.run(["logout"]).status == 0)
        #expect(try client.cached() == nil)

        // Both brokers answered, and nothing failed on the way.
        let upstreams = Set(log.map(\.upstream))
        #expect(upstreams == Set(brokers.map { $0.url.replacingOccurrences(of: "http://", with: "") }), "\(upstreams)")
        #expect(log.allSatisfy { $0.status < 500 }, "\(log)")
    }

    static func awaitReady(_ nginx: NginxProcess) async throws {
        let answered = try await eventually {
            guard nginx.process.isRunning else {
                let log = try? String(contentsOf: nginx.directory.appendingPathComponent("stderr.log"), encoding: .utf8)
                throw ServerTestError("nginx exited (port taken?): \(log ?? "")")
            }
            let reply = try? await HTTPClient.shared.send(HTTPClientRequest(method: "GET", url: nginx.url + "/healthz"))
            return reply?.status == 200
        }
        guard answered else { throw ServerTestError("nginx did not answer within 180 s") }
    }
}
