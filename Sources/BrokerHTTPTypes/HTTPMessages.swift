import BrokerCore

/// An outbound HTTP request, sent by an ``HTTPTransport``.
package struct HTTPClientRequest: Sendable {
    package var method: String
    package var url: String
    /// Header fields in order; names are sent as given.
    package var headers: [(name: String, value: String)]
    package var body: [UInt8]?
    /// Longest wait for the TCP (and TLS) connection.
    package var connectTimeout: Duration = .seconds(10)
    /// Longest time for the whole exchange, connection included.
    package var timeout: Duration = .seconds(30)
    /// Largest response body accepted; a larger one fails with ``HTTPClientError/responseTooLarge``.
    package var maxResponseBytes = 4 * 1024 * 1024
    /// Follow 3xx redirects (at most 5, never from https down to http). Off unless asked for.
    package var followRedirects = false
    /// Where the body goes as it arrives, when the sink takes it (see ``HTTPBodySink``); `nil`: into
    /// ``HTTPClientResponse/body``.
    package var sink: (any HTTPBodySink)?
    /// A PEM bundle the server's certificate is verified against instead of the system's trust store (a private
    /// CA, `server.ca_file`); verification itself is never off.
    package var caFile: String?
    /// Connect to public addresses only (a URL someone else chose: an app's metadata document): every address
    /// tried is checked just before its socket is opened — after name resolution, so a name that resolves to
    /// a loopback, private, link-local or reserved address is refused however it is spelled — and no proxy is
    /// used (the address checked is the one connected to). Fails with ``HTTPClientError/Kind/forbiddenAddress``.
    package var publicAddressesOnly = false

    package init(
        method: String = "GET", url: String, headers: [(name: String, value: String)] = [], body: [UInt8]? = nil
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }

    /// A POST of `application/x-www-form-urlencoded` fields (RFC 6749 §4.1.3 and friends).
    package static func form(url: String, fields: [(String, String)], headers: [(name: String, value: String)] = [])
        -> HTTPClientRequest
    {
        var request = HTTPClientRequest(
            method: "POST", url: url, headers: headers, body: Array(FormEncoding.encode(fields).utf8))
        request.headers.append((name: "Content-Type", value: "application/x-www-form-urlencoded"))
        request.headers.append((name: "Accept", value: "application/json"))
        return request
    }
}

/// Takes a response body piece by piece as it arrives, instead of memory: a download larger than memory, or
/// output that should appear as it comes (`broker request` writes to stdout).
///
/// Called on the thread running the exchange, one call at a time, in order.
package protocol HTTPBodySink: AnyObject, Sendable {
    /// The final response's head is complete (1xx heads, and redirects libcurl follows, are not final);
    /// `true` sends its body to ``write(_:)``, `false` keeps it in ``HTTPClientResponse/body`` as usual
    /// (a response that will not be shown, such as a 401 that is answered by retrying).
    func begin(statusLine: String, status: Int, headers: [(name: String, value: String)]) -> Bool
    /// A piece of the body; `false` aborts the exchange (whoever reads the output went away).
    func write(_ bytes: UnsafeRawBufferPointer) -> Bool
}

/// A complete HTTP response.
package struct HTTPClientResponse: Sendable {
    package var status: Int
    /// Header fields of the final response, in order.
    package var headers: [(name: String, value: String)]
    package var body: [UInt8]
    /// The final response's status line as received, without its line break (`HTTP/1.1 200 OK`).
    package var statusLine = ""
    /// Where a 3xx response points, resolved against the request's URL by libcurl (`nil` when it does not).
    package var redirectURL: String?
    /// Whether the body went to the request's ``HTTPBodySink`` (and ``body`` is empty).
    package var streamed = false

    package init(status: Int, headers: [(name: String, value: String)], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first value of the named header field (case-insensitive), if any.
    package func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return headers.first { $0.name.lowercased() == lower }?.value
    }

    package var bodyText: String { String(decoding: body, as: UTF8.self) }
}

/// Why an HTTP exchange failed; the transport's own message is kept in ``message``.
///
/// These are transport failures, never protocol answers: a 4xx or 5xx is a normal ``HTTPClientResponse``.
package struct HTTPClientError: Error, Sendable, Equatable, CustomStringConvertible {
    package enum Kind: String, Sendable {
        case invalidURL
        case resolveFailed
        case connectionFailed
        case timeout
        case tls
        case responseTooLarge
        case tooManyRedirects
        case cancelled
        case transport
        /// Every address of the host was one ``HTTPClientRequest/publicAddressesOnly`` refuses.
        case forbiddenAddress
    }

    package let kind: Kind
    /// libcurl's message for the failure (from its error buffer when it has one).
    package let message: String
    /// The CURLcode, for diagnostics.
    package let curlCode: Int

    package init(kind: Kind, message: String, curlCode: Int = 0) {
        self.kind = kind
        self.message = message
        self.curlCode = curlCode
    }

    package static func == (lhs: HTTPClientError, rhs: HTTPClientError) -> Bool { lhs.kind == rhs.kind }

    package var description: String { message }
}
