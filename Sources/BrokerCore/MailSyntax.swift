/// The few pieces of mail syntax the broker checks before it hands anything to an SMTP server: the server's
/// URL, and addresses (`someone@example.com`, or `Display Name <someone@example.com>` for a sender).
package enum MailSyntax {
    /// Why `url` cannot name a mail server, or `nil`: `smtp://HOST[:PORT]` or `smtps://HOST[:PORT]`.
    package static func urlProblem(_ url: String) -> String? {
        let lower = url.lowercased()
        guard lower.hasPrefix("smtp://") || lower.hasPrefix("smtps://") else {
            return "\"\(url)\" is not an smtp:// or smtps:// URL"
        }
        var authority = lower.drop { $0 != "/" }.dropFirst(2)
        while authority.hasSuffix("/") { authority = authority.dropLast() }
        guard !authority.isEmpty, !authority.hasPrefix(":"),
            !authority.contains(where: { $0 == "@" || $0 == "/" || $0 == "?" || $0 == "#" || $0.isWhitespace })
        else {
            return "\"\(url)\": give the server as smtp://HOST[:PORT] (user and password go in their own keys)"
        }
        return nil
    }

    /// The bare address of `text` (`a@b` or `Name <a@b>`), or `nil` when it is not one: one `@` with text on
    /// both sides, no spaces, controls, angle brackets or quotes inside, at most 254 bytes.
    package static func address(_ text: String) -> String? {
        var candidate = Substring(text)
        if let open = text.lastIndex(of: "<"), text.hasSuffix(">") {
            let name = text[..<open]
            guard !name.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\"" || $0 == "<" || $0 == ">" })
            else { return nil }
            candidate = text[text.index(after: open)..<text.index(before: text.endIndex)]
        }
        let parts = candidate.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty, candidate.utf8.count <= 254,
            !candidate.unicodeScalars.contains(where: {
                $0.value <= 0x20 || $0.value == 0x7F || "<>\"(),;:\\[]".unicodeScalars.contains($0)
            })
        else { return nil }
        return String(candidate)
    }
}
