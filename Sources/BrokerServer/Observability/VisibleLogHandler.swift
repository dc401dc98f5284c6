import BrokerCore
package import Logging

/// A log handler that writes through another one with every message and metadata value made visible
/// (``VisibleText``): a value that came from a request — a provider's `error_description`, a client id, an
/// unverified issuer — cannot forge a log line or send escape sequences to whoever reads the log.
package struct VisibleLogHandler: LogHandler {
    private var inner: any LogHandler

    package init(_ inner: any LogHandler) { self.inner = inner }

    package var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    package var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue.mapValues(Self.visible) }
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue.map(Self.visible) }
    }

    package func log(event: LogEvent) {
        var event = event
        event.message = "\(VisibleText.escape(event.message.description))"
        event.metadata = event.metadata?.mapValues(Self.visible)
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
