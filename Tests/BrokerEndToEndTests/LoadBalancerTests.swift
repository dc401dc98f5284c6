import BrokerCore
import BrokerHTTP
import BrokerSystem
import BrokerTestSupport
import BrokerTesting
import Foundation
import Google
import Testing

@Suite("two brokers behind nginx (round robin, no sticky sessions)")
struct LoadBalancerTests {
    @Test func theCLISignsInRefreshesAndLogsOutThroughNginx() async throws {
        let emulator = try await EmulatorProcess.start()
        let shared = try await ScaleOutProcessTests.Shared.make()
        // The brokers' issuer is the balancer's address: tokens, redirects and the provider's callback all
        // name it. Its port is chosen first and held until nginx (which binds with SO_REUSEADDR) listens on it.
        let reserved = try reserveLoopbackPort()
        let issuer = "http://127.0.0.1:\(reserved.port)"
        let brokers = [
            try await shared.serve(config: emulator.googleOnlyConfig, issuer: issuer),
            try await shared.serve(config: emulator.googleOnlyConfig, issuer: issuer),
        ]
        let balancer = try NginxProcess(upstreams: brokers.map(\.url), port: reserved.port)
        try await Self.awaitReady(balancer)
        reserved.release()
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
