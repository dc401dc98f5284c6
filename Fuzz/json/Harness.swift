import BrokerCore
import FuzzSupport

/// The JSON parser every request body, provider answer, config and cache file goes through.
/// Property: what it accepts serializes to a document that parses back to the same value (numbers compared as
/// the serializer writes them: a whole double below 10^15 as an integer), and serializing that value again gives
/// the same bytes.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSON(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = fuzzInput(data, size)
    guard let value = JSONValue.parse(input) else { return 0 }
    let text = value.serializedBytes
    guard let again = JSONValue.parse(text) else {
        require(false, "the serialization of an accepted document does not parse")
        return 0
    }
    require(again == numbersAsWritten(value), "the serialization parses to another value")
    require(again.serializedBytes == text, "serializing is not stable")
    return 0
}

/// `value` with every whole double under 10^15 as the integer the serializer writes for it.
func numbersAsWritten(_ value: JSONValue) -> JSONValue {
    switch value {
    case .double(let number) where number.isFinite && number.rounded(.towardZero) == number && abs(number) < 1e15:
        .int(Int64(number))
    case .array(let values): .array(values.map(numbersAsWritten))
    case .object(let members): .object(members.mapValues(numbersAsWritten))
    default: value
    }
}
