import BrokerCore
package import Logging

/// A log handler that writes through another one with every message and metadata value made visible
/// (``VisibleText``): a value that came from a request — a provider's `error_description`, a client id, an
/// unverified issuer — cannot forge a log line or send escape sequences to whoever reads the log.
///
/// The logger's own metadata is kept as it was set and made visible when a line is written, together with the
/// line's: every request sets its id on its logger, and most requests write no line at the broker's usual
/// level (escaping each value as it was set was 1.3% of a mint's CPU).
package struct VisibleLogHandler: LogHandler {
    private var inner: any LogHandler
    package var metadata: Logger.Metadata = [:]

    package init(_ inner: any LogHandler) { self.inner = inner }

    package var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        var event = event
        event.message = "\(VisibleText.escape(event.message.description))"
        // The line's own metadata wins over the logger's for one key, as with any handler.
        let all = metadata.isEmpty ? event.metadata : metadata.merging(event.metadata ?? [:]) { $1 }
        event.metadata = all?.mapValues(Self.visible)
        inner.log(event: event)
    }

    static func visible(_ value: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch value {
        case .string(let text): .string(VisibleText.escape(text))
        case .stringConvertible(let convertible): .string(VisibleText.escape(convertible.description))
        case .array(let values): .array(values.map(visible))
        case .dictionary(let members): .dictionary(members.mapValues(visible))
        }
    }
}
