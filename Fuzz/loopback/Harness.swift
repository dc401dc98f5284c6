import BrokerClient
import BrokerCore
import FuzzSupport

/// The CLI's loopback listener reading what arrives on its port (`broker login`): the browser's callback, or
/// anything a local process sends. Properties: nothing but `GET /callback` is a callback; a head without its
/// end is read on only while under the size limit; a callback's parameters are the ones its query encodes.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzLoopback(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = fuzzInput(data, size)
    switch LoopbackListener.examine(input) {
    case .incomplete:
        require(input.count <= 16 * 1024, "an oversized head is still being read")
    case .refused(let status):
        require(status.utf8.first.map { $0 == UInt8(ascii: "4") } ?? false, "refused with a non-4xx status")
    case .callback(let query):
        require(input.starts(with: "GET /callback".utf8), "a callback that is not GET /callback")
        let line = input.prefix { $0 != 0x0D && $0 != 0x0A }
        let target = String(decoding: line, as: UTF8.self).split(separator: " ")[1]
        let queryText = target.firstIndex(of: "?").map { String(target[target.index(after: $0)...]) } ?? ""
        let fields = FormEncoding.decode(queryText) ?? []
        for (name, value) in query {
            let first = fields.first { $0.0.utf8.elementsEqual(name.utf8) }
            require(first.map { $0.1.utf8.elementsEqual(value.utf8) } ?? false, "a parameter not from the query")
        }
    }
    return 0
}
