import BrokerCore

/// A request body's parameters, from JSON or from `application/x-www-form-urlencoded`.
struct RequestInput: Sendable {
    let fields: [String: JSONValue]

    /// The largest body any endpoint reads; larger ones get 413 before they are read.
    static let maxBodySize = 64 * 1024

    /// Parses `body` by its media type: JSON (also when no type is given) must be an object; a form may not
    /// repeat a parameter (RFC 6749 §3.2: parameters "MUST NOT be included more than once").
    static func parse(body: [UInt8], contentType: String?, allowForm: Bool) throws(APIError) -> RequestInput {
        switch contentType.map(mediaType) {
        case nil:
            // A body without a type is what a cross-site form or fetch can send without a preflight; reading
            // it as JSON let any web page post to /auth/login.
            throw APIError.unsupportedMediaType(
                "Content-Type is required: application/json"
                    + (allowForm ? " or application/x-www-form-urlencoded" : ""))
        case "application/json":
            guard !body.isEmpty else { throw APIError.invalidRequest("the request body is empty; send a JSON object") }
            switch JSONValue.parseReportingError(body) {
            case .success(.object(let members)): return RequestInput(fields: members)
            case .success: throw APIError.invalidRequest("the request body must be a JSON object")
            case .failure(let error): throw APIError.invalidRequest("malformed JSON: \(error)")
            }
        case "application/x-www-form-urlencoded" where allowForm:
            guard let pairs = FormEncoding.decode(bytes: body) else {
                throw APIError.invalidRequest("malformed form body (bad percent-encoding or not UTF-8)")
            }
            var fields: [String: JSONValue] = [:]
            for (name, value) in pairs {
                guard fields.updateValue(.string(value), forKey: name) == nil else {
                    throw APIError.invalidRequest("parameter \"\(name.prefix(64))\" is repeated")
                }
            }
            return RequestInput(fields: fields)
        default:
            let accepted = allowForm ? "application/json or application/x-www-form-urlencoded" : "application/json"
            throw APIError.unsupportedMediaType("send \(accepted)")
        }
    }

    /// The media type of a `Content-Type` value: what comes before any `;` parameters, without the spaces around
    /// it, in lowercase (RFC 9110 §8.3.1). Read as bytes: splitting and lowercasing the text by characters cost
    /// ~14,000 instructions of each form-encoded mint under callgrind.
    static func mediaType(_ contentType: String) -> String {
        var bytes = Array(contentType.utf8.prefix { $0 != UInt8(ascii: ";") })
        func isSpace(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        while let last = bytes.last, isSpace(last) { bytes.removeLast() }
        let start = bytes.firstIndex { !isSpace($0) } ?? bytes.endIndex
        bytes.removeFirst(start)
        for index in bytes.indices where (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(bytes[index]) {
            bytes[index] += 0x20
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A required string parameter.
    func string(_ name: String) throws(APIError) -> String {
        guard let value = fields[name] else { throw APIError.invalidRequest("\"\(name)\" is required") }
        guard case .string(let text) = value else { throw APIError.invalidRequest("\"\(name)\" must be a string") }
        guard !text.isEmpty else { throw APIError.invalidRequest("\"\(name)\" is empty") }
        return text
    }

    /// An optional string parameter (`null` counts as absent).
    /// The fields that are strings (a form's, or a JSON object's string members).
    var textFields: [String: String] { fields.compactMapValues(\.stringValue) }

    func optionalString(_ name: String) throws(APIError) -> String? {
        switch fields[name] {
        case nil, .null?: return nil
        case .string(let text)?: return text
        default: throw APIError.invalidRequest("\"\(name)\" must be a string")
        }
    }
}
