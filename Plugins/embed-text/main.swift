import Foundation

// embed-text INPUT OUTPUT NAME: writes OUTPUT, a Swift file declaring `let NAME: String` with INPUT's text
// (UTF-8, newline-separated, no control characters but the newline; a final newline is dropped). Run by the
// EmbedText build-tool plugin.

let arguments = CommandLine.arguments
guard arguments.count == 4 else {
    FileHandle.standardError.write(Data("usage: embed-text INPUT OUTPUT NAME\n".utf8))
    exit(2)
}
let (input, output, name) = (arguments[1], arguments[2], arguments[3])

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("embed-text: \(input): \(message)\n".utf8))
    exit(1)
}

guard let data = FileManager.default.contents(atPath: input) else { fail("cannot be read") }
guard var text = String(data: data, encoding: .utf8) else { fail("is not UTF-8") }
if text.hasSuffix("\n") { text.removeLast() }
if let line = text.split(separator: "\n", omittingEmptySubsequences: false).firstIndex(where: { line in
    line.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
}) {
    fail("line \(line + 1) holds a control character")
}
// A raw literal whose delimiter occurs nowhere in the text: enough `#`s that no quote
// or backslash in the text is followed by as many.
var hashes = 1
while text.contains("\"" + String(repeating: "#", count: hashes))
    || text.contains("\\" + String(repeating: "#", count: hashes))
{
    hashes += 1
}
let delimiter = String(repeating: "#", count: hashes)
let source = """
    // Generated at build time by the EmbedText plugin from \((input as NSString).lastPathComponent); edit that file.

    let \(name): String = \(delimiter)\"\"\"
    \(text)
    \"\"\"\(delimiter)

    """
do {
    try Data(source.utf8).write(to: URL(fileURLWithPath: output), options: .atomic)
} catch {
    fail("cannot write \(output): \(error)")
}
