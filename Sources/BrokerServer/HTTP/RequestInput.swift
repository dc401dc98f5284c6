import BrokerCore

/// A request body's parameters, from JSON or from `application/x-www-form-urlencoded`.
package struct RequestInput: Sendable {
    let fields: [String: JSONValue]

    /// The largest body any endpoint reads; larger ones get 413 before they are read.
    package static let maxBodySize = 64 * 1024

    /// Parses `body` by its media type: JSON (also when no type is given) must be an object; a form may not
    /// repeat a parameter (RFC 6749 §3.2: parameters "MUST NOT be included more than once").
    package static func parse(body: [UInt8], contentType: String?, allowForm: Bool) throws(APIError) -> RequestInput {
        guard let contentType else {
            // A body without a type is what a cross-site form or fetch can send without a preflight; reading
            // it as JSON let any web page post to /auth/login.
            throw APIError.unsupportedMediaType(
                "Content-Type is required: application/json"
                    + (allowForm ? " or application/x-www-form-urlencoded" : ""))
        }
        if hasMediaType(contentType, "application/json") {
            guard !body.isEmpty else { throw APIError.invalidRequest("the request body is empty; send a JSON object") }
            switch JSONValue.parseReportingError(body) {
            case .success(.object(let members)): return RequestInput(fields: members)
            case .success: throw APIError.invalidRequest("the request body must be a JSON object")
            case .failure(let error): throw APIError.invalidRequest("malformed JSON: \(error)")
            }
        }
        if allowForm, hasMediaType(contentType, "application/x-www-form-urlencoded") {
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
        }
        let accepted = allowForm ? "application/json or application/x-www-form-urlencoded" : "application/json"
        throw APIError.unsupportedMediaType("send \(accepted)")
    }

    /// Whether the media type of a `Content-Type` value is `expected` (lowercase): what comes before any `;`
    /// parameters, without the spaces around it, compared without regard to ASCII case (RFC 9110 §8.3.1). Read in
    /// place, over the value's contiguous bytes: making the type as an array and a string (the way before) cost
    /// ~3,500 instructions of a mint under callgrind, splitting and lowercasing it by characters ~14,000, and
    /// walking the string's UTF-8 view by its indices ~5,000.
    package static func hasMediaType(_ contentType: String, _ expected: String) -> Bool {
        var contentType = contentType
        var expected = expected
        return contentType.withUTF8 { value in
            var end = value.firstIndex(of: UInt8(ascii: ";")) ?? value.endIndex
            while end > 0, value[end - 1].isHTTPWhitespace { end -= 1 }
            var start = 0
            while start < end, value[start].isHTTPWhitespace { start += 1 }
            let type = UnsafeBufferPointer(rebasing: value[start..<end])
            return expected.withUTF8 { ASCIIToken.equal(bytes: type, $0) }
        }
    }

    /// A required string parameter.
    package func string(_ name: String) throws(APIError) -> String {
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
