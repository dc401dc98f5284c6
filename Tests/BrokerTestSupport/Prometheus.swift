import BrokerCore
import BrokerHTTP
import BrokerServer
package import BrokerSystem
import BrokerTesting
package import Foundation
import HTTPTypes
import Testing

/// Debian's Prometheus on a free loopback port, scraping one target every second with a bearer token file.
package final class PrometheusProcess: @unchecked Sendable {
    package private(set) var process: ChildProcess!
    package let directory: URL
    package let url: String
    package var log: String {
        (try? String(contentsOf: directory.appendingPathComponent("prometheus.log"), encoding: .utf8)) ?? ""
    }

    package init(target: String, tokenFile: String) throws {
        directory = try TemporaryDirectory.make(prefix: "broker-prometheus-server")
        let port = try freeLoopbackPort()
        url = "http://127.0.0.1:\(port)"
        let config = """
            global:
              scrape_interval: 1s
              scrape_timeout: 1s
            scrape_configs:
              - job_name: broker
                authorization:
                  credentials_file: \(tokenFile)
                static_configs:
                  - targets: ['\(target)']

            """
        let file = directory.appendingPathComponent("prometheus.yml")
        try Data(config.utf8).write(to: file)
        let logPath = directory.appendingPathComponent("prometheus.log").path
        try Data().write(to: URL(fileURLWithPath: logPath))
        process = try ChildProcess(
            "/usr/bin/prometheus",
            [
                "--config.file=\(file.path)", "--storage.tsdb.path=\(directory.appendingPathComponent("data").path)",
                "--web.listen-address=127.0.0.1:\(port)", "--log.level=warn",
            ], stdin: .null, stdout: .file(logPath), stderr: .standardOutput)
    }

    /// The value of the first series an instant query returns; `nil` when it returns none.
    package func query(_ expression: String) async throws -> String? {
        let answer = try await HTTPClient.shared.send(
            HTTPClientRequest(url: url + "/api/v1/query?" + FormEncoding.encode([("query", expression)])))
        guard answer.status == 200, let json = JSONValue.parse(answer.body),
            case .array(let results)? = json["data"]?["result"], let first = results.first,
            case .array(let pair)? = first["value"], pair.count == 2
        else { return nil }
        return pair[1].stringValue
    }

    package func stop() {
        process.send(SIGTERM)
    }
}
