/// A secret value (password, token, client secret) whose printed forms are redacted.
///
/// Interpolating a `Secret` into a log line or an error message prints `<redacted>`; the value is reached
/// only through ``exposed``, a name meant to stand out in review.
public struct Secret: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    public let exposed: String

    public init(_ value: String) { self.exposed = value }

    public var description: String { "<redacted>" }
    public var debugDescription: String { "Secret(<redacted>)" }
}
