/// HTML text escaping for the small pages the CLI and the emulators serve: any text taken from a provider,
/// a URL or a person goes through it.
package enum HTML {
    /// `text` with `& < > " '` replaced by their character references, decided over its UTF-8 bytes (RT3-1).
    /// Never over `Character`s: a grapheme cluster that joins a markup byte to its neighbour (U+0600 before `<`,
    /// a combining mark after `"`) is one `Character` equal to none of them, and would pass it through raw.
    /// Every byte below 0x80 is a whole scalar in UTF-8, so no other byte can be taken for one of the five.
    package static func escape(_ text: String) -> String {
        let source = text.utf8
        guard source.contains(where: isMarkup) else { return text }
        var out: [UInt8] = []
        out.reserveCapacity(source.count + 16)
        for byte in source {
            switch byte {
            case UInt8(ascii: "&"): out.append(contentsOf: "&amp;".utf8)
            case UInt8(ascii: "<"): out.append(contentsOf: "&lt;".utf8)
            case UInt8(ascii: ">"): out.append(contentsOf: "&gt;".utf8)
            case UInt8(ascii: "\""): out.append(contentsOf: "&quot;".utf8)
            case UInt8(ascii: "'"): out.append(contentsOf: "&#39;".utf8)
            default: out.append(byte)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func isMarkup(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "&") || byte == UInt8(ascii: "<") || byte == UInt8(ascii: ">")
            || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'")
    }
}

extension HTML {
    /// How a page's title reads: neutral, or the end of a sign-in that worked or failed.
    package enum Tone: Sendable { case neutral, success, failure }

    /// One look for every page people see from broker — the broker's own pages (reset, verification, device)
    /// and the CLI's loopback page at the end of a browser sign-in: no script, no external asset, readable at a
    /// phone's width. `body` is trusted markup (callers escape what they put in); the title is escaped here.
    /// `wide`: a page of lists (the account page) rather than one form.
    package static func document(title: String, body: String, tone: Tone = .neutral, wide: Bool = false) -> String {
        let titleColour =
            switch tone {
            case .neutral: ""
            case .success: " color: #1a7f37;"
            case .failure: " color: #b42318;"
            }
        return """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(escape(title))</title>
            <style>
            body { font-family: system-ui, sans-serif; line-height: 1.5; color: #1f2328; background: #f6f8fa; margin: 0; }
            main { max-width: \(wide ? "44rem" : "26rem"); margin: 3rem auto; padding: 1.5rem; background: #fff; border: 1px solid #d0d7de; border-radius: 10px; }
            h1 { font-size: 1.35rem; margin-top: 0;\(titleColour) }
            label { display: block; margin: .9rem 0 .3rem; font-weight: 600; }
            input[type=password], input[type=email], input[type=text] { width: 100%; box-sizing: border-box; padding: .6rem; font-size: 1rem; border: 1px solid #8c959f; border-radius: 6px; }
            input.code { font-family: ui-monospace, monospace; font-size: 1.4rem; letter-spacing: .15em; text-transform: uppercase; text-align: center; }
            .code { font-family: ui-monospace, monospace; font-weight: 700; letter-spacing: .1em; }
            .asking { background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: .6rem .8rem; }
            button { margin-top: 1.2rem; width: 100%; padding: .7rem; font-size: 1rem; color: #fff; background: #1f6feb; border: 0; border-radius: 6px; }
            button.secondary { color: #1f2328; background: #f6f8fa; border: 1px solid #d0d7de; }
            button img.icon { vertical-align: -3px; margin-right: 4px; }
            button.danger { color: #fff; background: #cf222e; }
            .or { text-align: center; color: #59636e; margin: 1.2rem 0 0; }
            .problem { color: #a40e26; background: #ffebe9; border: 1px solid #ff8182; border-radius: 6px; padding: .6rem; }
            .muted { color: #59636e; font-size: .9rem; }
            .said { color: #1a7f37; background: #dafbe1; border: 1px solid #4ac26b; border-radius: 6px; padding: .6rem; }
            h2 { font-size: 1.05rem; margin: 1.8rem 0 .4rem; }
            ul.items { list-style: none; padding: 0; margin: 0; }
            ul.items li { display: flex; justify-content: space-between; align-items: center; gap: .8rem; padding: .6rem 0; border-top: 1px solid #d0d7de; overflow-wrap: anywhere; }
            ul.items li form { margin: 0; flex: none; }
            button.inline { width: auto; margin: 0; padding: .35rem .9rem; font-size: .9rem; color: #1f2328; background: #f6f8fa; border: 1px solid #d0d7de; }
            .qr svg { display: block; margin: .8rem auto; max-width: 100%; height: auto; }
            ul.codes { columns: 2; padding-left: 1.2rem; }
            @media (max-width: 30rem) { main { margin: 0; border: 0; border-radius: 0; min-height: 100vh; } }
            </style></head>
            <body><main>
            <h1>\(escape(title))</h1>
            \(body)
            </main></body></html>
            """
    }
}
