import BrokerConfiguration
package import BrokerCore
import BrokerHTTP
import BrokerServer
import BrokerTesting
import Foundation
import HTTPTypes
import Logging
import Testing

/// Tests/Interop/smtp_sink.py: a real SMTP server (aiosmtpd) that parses each message it accepts with Python's
/// email package and keeps it as a JSON line.
package final class SMTPSink: @unchecked Sendable {
    package let server: ScriptServer
    package let port: Int
    package let file: String

    package init(arguments: [String] = []) throws {
        file = try TemporaryDirectory.make(prefix: "broker-smtp").appendingPathComponent("mail.jsonl").path
        server = try ScriptServer(
            TestPaths.interop("smtp_sink.py"), arguments, environment: ["SMTP_SINK_FILE": file],
            prefix: "smtp sink listening on ")
        guard let number = Int(server.ready) else { throw ServerTestError("smtp_sink.py: no port in \(server.ready)") }
        port = number
    }

    package static func start(_ arguments: [String] = []) async throws -> SMTPSink {
        try await offThread { try SMTPSink(arguments: arguments) }
    }

    package var url: String { "smtp://127.0.0.1:\(port)" }

    /// The messages once `condition` holds for them; waits on the sink's "accepted" lines (off the cooperative
    /// pool), at most `timeout` for each next one.
    /// - Parameter sender: the broker process that sends them: when they do not come, the error carries its
    ///   mail log lines (each attempt, its error, the retries), which say whether the broker tried, when, and
    ///   what the mail server answered.
    package func messages(
        timeout: Duration = .seconds(60), from sender: BrokerProcess? = nil,
        until condition: @escaping @Sendable ([JSONValue]) -> Bool
    ) async throws -> [JSONValue] {
        try await offThread { [self] in
            while true {
                let kept = try messages()
                if condition(kept) { return kept }
                guard server.nextLine(timeout: timeout) == "accepted" else {
                    let log = sender.map { process in
                        process.stderr.split(separator: "\n").filter { $0.contains("mail") }.suffix(20)
                            .joined(separator: "\n")
                    }
                    throw ServerTestError(
                        "smtp_sink.py: the awaited messages did not come within \(timeout); \(kept.count) came"
                            + (log.map { "; the broker's mail log:\n" + $0 } ?? ""))
                }
            }
        }
    }

    /// Every message accepted so far, as smtp_sink.py parsed it.
    package func messages() throws -> [JSONValue] {
        guard let data = FileManager.default.contents(atPath: file) else { return [] }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").compactMap {
            JSONValue.parse(Array($0.utf8))
        }
    }

    deinit { server.close() }

    /// The token in the newest mail to `email` with `subject` whose link goes to `path` (`…?token=`).
    package func mailedToken(to email: String, subject: String, path: String) throws -> String? {
        let text =
            try messages().last {
                $0["to"]?.stringValue == email && $0["subject"]?.stringValue == subject
            }?["text"]?.stringValue ?? ""
        guard let range = text.range(of: path + "?token=") else { return nil }
        return String(text[range.upperBound...].prefix { !$0.isWhitespace })
    }
}
