import BrokerCore

/// An `Authorization` value as RFC 9110 §11.4 writes it, `<scheme> <credentials>`, read among its bytes.
///
/// Splitting the text by `Character`s, lowercasing the scheme and trimming Unicode white space cost 3,500–7,000
/// instructions of a mint or `GET /auth/me` under callgrind. The reading is the one those three places had: spaces
/// before the scheme are skipped, the scheme ends at the next space, and what follows that space, without the
/// spaces and tabs around it (HTTP's optional white space), is the credentials.
package struct AuthorizationCredentials {
    /// The scheme as sent; ``isScheme(_:)`` compares it.
    package let scheme: Substring
    /// What follows the scheme, trimmed; may be empty when only white space followed it.
    package let credentials: String

    /// `nil` when no space and nothing after it follow the scheme.
    package init?(_ value: String) {
        let utf8 = value.utf8
        let space = UInt8(ascii: " ")
        guard let schemeStart = utf8.firstIndex(where: { $0 != space }),
            let schemeEnd = utf8[schemeStart...].firstIndex(of: space)
        else { return nil }
        let rest = utf8.index(after: schemeEnd)
        guard rest < utf8.endIndex else { return nil }
        let start = utf8[rest...].firstIndex { !$0.isHTTPWhitespace } ?? utf8.endIndex
        var end = utf8.endIndex
        while end > start, utf8[utf8.index(before: end)].isHTTPWhitespace { end = utf8.index(before: end) }
        scheme = value[schemeStart..<schemeEnd]
        credentials = String(value[start..<end])
    }

    /// Whether the scheme is `name` (given in lowercase) without regard to ASCII case: `Bearer`, `bearer`, `BEARER`.
    package func isScheme(_ name: String) -> Bool { ASCIIToken.equal(scheme, name) }
}
