import BrokerClient
import BrokerCore
import BrokerHTTP
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

@Suite("the metrics port and its token, on a broker process; Prometheus scraping it")
struct MetricsProcessTests {
    @Test(arguments: ["empty", "missing"])
    func anUnusableMetricsTokenFileStopsTheStartWithItsName(kind: String) async throws {
        let directory = try TemporaryDirectory.make(prefix: "broker-metrics-token")
        let file = directory.appendingPathComponent("token").path
        if kind == "empty" { try Data("\n".utf8).write(to: URL(fileURLWithPath: file)) }
        do {
            let server = try await BrokerProcess.start(config: #"{"server": {"metrics_token_file": "\#(file)"}}"#)
            server.stop()
            Issue.record("broker serve started with a metrics token file it cannot use")
        } catch {
            #expect("\(error)".contains("cannot read the metrics token file \(file)"), "\(error)")
            #expect("\(error)".contains(kind == "empty" ? "the file is empty" : "No such file"), "\(error)")
        }
    }

    @Test(.hangBound)
    func aRealPrometheusScrapesTheMetricsPortWithItsToken() async throws {
        let directory = try TemporaryDirectory.make(prefix: "broker-prometheus")
        let tokenFile = directory.appendingPathComponent("metrics-token")
        try Data("scrape-\(UUID().uuidString)\n".utf8).write(to: tokenFile)
        let reserved = try reserveLoopbackPort()
        let metricsPort = reserved.port
        let broker = try await BrokerProcess.start(
            config: #"{"server": {"metrics_port": \#(metricsPort), "metrics_token_file": "\#(tokenFile.path)"}}"#)
        reserved.release()
        defer { broker.stop() }
        // The main port does not serve /metrics once it has a port of its own.
        #expect(try await HTTPClient.shared.send(HTTPClientRequest(url: broker.url + "/metrics")).status == 404)
        let metricsURL = "http://127.0.0.1:\(metricsPort)/metrics"
        #expect(try await HTTPClient.shared.send(HTTPClientRequest(url: metricsURL)).status == 401)

        var register = HTTPClientRequest(
            method: "POST", url: broker.url + "/auth/register",
            headers: [(name: "Content-Type", value: "application/json")],
            body: Array(#"{"email":"scraped@example.com","password":"correct horse battery staple"}"#.utf8))
        register.timeout = .seconds(120)
        #expect(try await HTTPClient.shared.send(register).status == 201)

        let prometheus = try PrometheusProcess(target: "127.0.0.1:\(metricsPort)", tokenFile: tokenFile.path)
        defer { prometheus.stop() }
        // Scraped every second: wait for the series to arrive (an event, not a window), at most two minutes.
        let query = "broker_registrations_total{outcome=\"created\"}"
        let arrived = try await eventually(within: 120, every: .milliseconds(500)) {
            ((try? await prometheus.query(query)) ?? nil) != nil
        }
        #expect(arrived, "Prometheus log: \(prometheus.log)")
        #expect(try await prometheus.query(query) == "1", "Prometheus log: \(prometheus.log)")
        #expect(try await prometheus.query("up{job=\"broker\"}") == "1")
    }
}
