/// Text made safe to write to a log line or a terminal: control characters that could forge a log line or
/// drive a terminal (ESC sequences, CR, backspace, C1 controls, bidirectional overrides) become visible
/// `\u{…}` escapes. Line feeds and tabs survive only where the caller allows them.
package enum VisibleText {
    /// `text` with every control character escaped; with `keepingLines`, `\n` and `\t` are kept.
    package static func escape(_ text: String, keepingLines: Bool = false) -> String {
        guard text.unicodeScalars.contains(where: { needsEscape($0, keepingLines: keepingLines) }) else { return text }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if needsEscape(scalar, keepingLines: keepingLines) {
                out.append(contentsOf: "\\u{\(String(scalar.value, radix: 16, uppercase: true))}".unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }

    static func needsEscape(_ scalar: Unicode.Scalar, keepingLines: Bool) -> Bool {
        switch scalar.value {
        case 0x0A, 0x09: !keepingLines
        case 0x00...0x1F, 0x7F...0x9F: true
        // Bidirectional embeddings, overrides and isolates: they reorder what a reader sees.
        case 0x202A...0x202E, 0x2066...0x2069, 0x200E, 0x200F, 0x061C: true
        // Line and paragraph separators end lines in some viewers.
        case 0x2028, 0x2029: true
        default: false
        }
    }
}
