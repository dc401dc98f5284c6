package import BrokerCore
import BrokerSystem
import Glibc
package import Logging
import Synchronization

/// `broker serve --log-format json`: one JSON object per log line on standard error — `time`, `level`,
/// `label`, `message`, then the metadata as members — for log shippers that read JSON. The JSON encoding
/// escapes every control character, so a value from a request cannot break a line or forge another.
package struct JSONLogHandler: LogHandler {
    package var logLevel: Logger.Level = .info
    package var metadata: Logger.Metadata = [:]
    let label: String
    let clock: any WallClock

    /// One writer at a time, so that lines from several threads never interleave.
    private static let output = Mutex<Int32>(STDERR_FILENO)

    package init(label: String, clock: any WallClock) {
        self.label = label
        self.clock = clock
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        var object: [String: JSONValue] = [:]
        for (key, value) in metadata.merging(event.metadata ?? [:], uniquingKeysWith: { $1 }) {
            object[key] = Self.json(value)
        }
        object["time"] = .string(AuditTrail.timestamp(clock.seconds()))
        object["level"] = .string(event.level.rawValue)
        object["label"] = .string(label)
        object["message"] = .string(event.message.description)
        var line = JSONValue.object(object).serializedBytes
        line.append(UInt8(ascii: "\n"))
        // A log line that cannot be written has nowhere else to go.
        _ = Self.output.withLock { descriptor in PosixFile.writeAll(line, to: descriptor) }
    }

    static func json(_ value: Logger.Metadata.Value) -> JSONValue {
        switch value {
        case .string(let text): .string(text)
        case .stringConvertible(let convertible): .string(convertible.description)
        case .array(let values): .array(values.map(json))
        case .dictionary(let members): .object(members.mapValues(json))
        }
    }
}
