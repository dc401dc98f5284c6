import BrokerCore
import FuzzSupport

/// Form and query decoding (`application/x-www-form-urlencoded`: bodies of /token, /auth/login, callbacks'
/// queries). Properties: decoded fields encode to text that decodes to the same fields; a percent-decoded
/// string percent-encodes to text that decodes back to it.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzForm(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: fuzzInput(data, size), as: UTF8.self)
    if let fields = FormEncoding.decode(text) {
        let encoded = FormEncoding.encode(fields)
        let again = FormEncoding.decode(encoded)
        require(again != nil, "the encoding of decoded fields does not decode")
        if let again {
            require(again.count == fields.count, "field count changed: \(fields.count) → \(again.count)")
            for (one, other) in zip(fields, again) {
                require(same(one.0, other.0) && same(one.1, other.1), "a field changed in a round trip")
            }
        }
    }
    for plusIsSpace in [true, false] {
        guard let decoded = FormEncoding.percentDecode(Substring(text), plusIsSpace: plusIsSpace) else { continue }
        let encoded = FormEncoding.percentEncode(decoded)
        let again = FormEncoding.percentDecode(Substring(encoded), plusIsSpace: plusIsSpace)
        require(
            again.map { same($0, decoded) } ?? false, "percent-encoding a decoded string does not decode back to it")
    }
    return 0
}

/// Byte equality (`==` on `String` is canonical equivalence, which would hide a changed byte).
func same(_ one: String, _ other: String) -> Bool { one.utf8.elementsEqual(other.utf8) }
