import BrokerKeyring
import FuzzSupport

/// The D-Bus message reader (what a session bus, or anything pretending to be one, sends the CLI), and
/// signatures. Properties: a message that reads encodes (little-endian) to bytes that read back as the same
/// message; a signature that splits joins back to itself; no input crashes or allocates beyond the 1 MiB limit.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDBus(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = fuzzInput(data, size)
    guard let mode = input.first else { return 0 }
    let rest = Array(input.dropFirst())
    if mode % 2 == 0 {
        guard let message = try? DBusMessage.decode(rest) else { return 0 }
        let again = (try? message.encode()).flatMap { try? DBusMessage.decode($0) }
        require(again == message, "a D-Bus message does not survive encoding and reading")
    } else {
        let text = String(decoding: rest, as: UTF8.self)
        guard let types = try? DBusSignature.split(text) else { return 0 }
        require(types.joined() == text, "a signature's complete types do not join back to it")
    }
    return 0
}
