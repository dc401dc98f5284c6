/// A secret value (password, token, client secret) whose printed forms are redacted.
///
/// Interpolating a `Secret` into a log line or an error message prints `<redacted>`; the value is reached
/// only through ``exposed``, a name meant to stand out in review.
package struct Secret: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    package let exposed: String

    package init(_ value: String) { self.exposed = value }

    package var description: String { "<redacted>" }
    package var debugDescription: String { "Secret(<redacted>)" }
}
