import BrokerCore
package import HTTPTypes
package import Hummingbird
package import NIOCore

/// The HTTP edge every route shares: API answers and errors as responses, bodies and queries read strictly.
extension BrokerHTTPServer {
    static func response(_ error: APIError) -> Response {
        response(APIResponse(status: error.status, body: error.body, headers: error.headers))
    }

    static func response(_ api: APIResponse) -> Response {
        let parts = responseParts(api)
        return Response(status: parts.status, headers: parts.headers, body: ResponseBody(byteBuffer: parts.body))
    }

    /// An answer's status, header fields and body bytes: the router's ``response(_:)`` and
    /// ``ConstantDocumentHandler`` both send these (the latter with `Content-Length` added as Hummingbird adds it).
    package static func responseParts(_ api: APIResponse) -> (
        status: HTTPResponse.Status, headers: HTTPFields, body: ByteBuffer
    ) {
        var headers = HTTPFields()
        if api.html == nil { headers[.contentType] = "application/json" }
        for (name, value) in api.headers {
            if let field = HTTPField.Name(name) { headers.append(HTTPField(name: field, value: value)) }
        }
        let bytes: [UInt8]
        if let serialized = api.serialized {
            bytes = serialized
        } else {
            var made = api.html.map { Array($0.utf8) } ?? api.body.serializedBytes
            made.append(UInt8(ascii: "\n"))
            bytes = made
        }
        return (HTTPResponse.Status(code: api.status), headers, ByteBuffer(bytes: bytes))
    }

    /// Reads a body of at most ``RequestInput/maxBodySize`` bytes and parses it.
    nonisolated(nonsending) static func input(_ request: Request, allowForm: Bool) async throws -> RequestInput {
        let declared = request.headers.value(.contentLength).flatMap(Int.init)
        if let declared, declared > RequestInput.maxBodySize {
            throw APIError.payloadTooLarge(limit: RequestInput.maxBodySize)
        }
        let buffer = try await collected(request.body, upTo: RequestInput.maxBodySize, declaredLength: declared)
        return try RequestInput.parse(
            body: Array(buffer.readableBytesView),
            contentType: request.headers.value(.contentType),
            allowForm: allowForm
        )
    }

    /// A body's bytes, at most `limit` of them (413 `payload_too_large` beyond, however the body arrives).
    ///
    /// NIO's `collect(upTo:)` does the same, but as a function of no isolation it goes through the event loop's
    /// queue on its way in and out, and so do the calls it makes (five trips a mint under callgrind). Here the
    /// loop runs on the caller's executor, and only the body's own stream waits.
    ///
    /// With a `declaredLength` (the request's `Content-Length`), reading stops once that many bytes are in:
    /// NIO's HTTP/1.1 decoder frames a body by its length, so what would follow is the request's end, which
    /// Hummingbird reads before the next request anyway. Asking the body for it went through more of
    /// Hummingbird's and NIO's async sequences than Hummingbird's own read of the end: ~8,000 instructions a
    /// mint under callgrind.
    package nonisolated(nonsending) static func collected(
        _ body: RequestBody, upTo limit: Int, declaredLength: Int? = nil
    ) async throws -> ByteBuffer {
        if declaredLength == 0 { return ByteBuffer() }
        var parts = body.makeAsyncIterator()
        guard var collected = try await parts.next() else { return ByteBuffer() }
        guard collected.readableBytes <= limit else { throw APIError.payloadTooLarge(limit: limit) }
        while collected.readableBytes != declaredLength, var part = try await parts.next() {
            guard part.readableBytes <= limit - collected.readableBytes else {
                throw APIError.payloadTooLarge(limit: limit)
            }
            collected.writeBuffer(&part)
        }
        return collected
    }

    /// The query's parameters, strictly: percent-decoded, UTF-8, none repeated.
    static func query(_ request: Request) throws -> [String: String] {
        guard let text = request.uri.query, !text.isEmpty else { return [:] }
        guard text.utf8.count <= 8192, let pairs = FormEncoding.decode(text) else {
            throw APIError.invalidRequest("malformed query string")
        }
        var fields: [String: String] = [:]
        for (name, value) in pairs {
            guard fields.updateValue(value, forKey: name) == nil else {
                throw APIError.invalidRequest("parameter \"\(name.prefix(64))\" is repeated")
            }
        }
        return fields
    }
}
