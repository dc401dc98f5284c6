internal import CCurl
import Glibc
import Synchronization

/// The state of one exchange while libcurl runs it: buffers the callbacks fill, the cancel flag.
///
/// Used by exactly one thread (the one running `curl_easy_perform`) except for `cancelled`, which is atomic.
final class Transfer: @unchecked Sendable {
    let request: HTTPClientRequest
    let cancelled = Atomic<Bool>(false)
    private var body: [UInt8] = []
    private var headerLines: [String] = []
    private var statusLine = ""
    private var tooLarge = false
    /// This response's body goes to the request's sink (decided when its head was complete).
    private var streaming = false
    private var sinkClosed = false
    /// The addresses ``HTTPClientRequest/publicAddressesOnly`` refused, for the error.
    private var refusedAddresses: [String] = []

    init(request: HTTPClientRequest) { self.request = request }

    /// libcurl's socket for `address`, or none when the request takes public addresses only and this is not one.
    fileprivate func openSocket(_ address: UnsafeMutablePointer<curl_sockaddr>) -> curl_socket_t {
        let family = address.pointee.family
        var bytes: [UInt8] = []
        if let raw = broker_curl_sockaddr_address(address) {
            if family == AF_INET {
                bytes = withUnsafeBytes(of: raw.loadUnaligned(as: sockaddr_in.self).sin_addr) { Array($0) }
            } else if family == AF_INET6 {
                bytes = withUnsafeBytes(of: raw.loadUnaligned(as: sockaddr_in6.self).sin6_addr) { Array($0) }
            }
        }
        guard PublicAddress.isPublic(bytes) else {
            refusedAddresses.append(PublicAddress.text(bytes))
            return broker_curl_socket_bad()
        }
        return socket(family, address.pointee.socktype, address.pointee.protocol)
    }

    func perform(on handle: UnsafeMutableRawPointer, userAgent: String) -> Result<HTTPClientResponse, HTTPClientError> {
        let lowerURL = request.url.lowercased()
        guard lowerURL.hasPrefix("http://") || lowerURL.hasPrefix("https://") else {
            return .failure(HTTPClientError(kind: .invalidURL, message: "only http and https URLs are allowed"))
        }
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        var headerList: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(headerList) }
        for (name, value) in request.headers {
            // CR or LF in a header would let a caller inject headers or split the request.
            guard !name.contains(where: \.isNewline), !value.contains(where: \.isNewline), !name.isEmpty else {
                return .failure(HTTPClientError(kind: .invalidURL, message: "header \(name) contains a line break"))
            }
            headerList = curl_slist_append(headerList, "\(name): \(value)")
        }
        // curl adds "Expect: 100-continue" to larger bodies, which costs a round trip; an empty value removes it.
        headerList = curl_slist_append(headerList, "Expect:")

        let me = Unmanaged.passUnretained(self).toOpaque()
        let body = request.body ?? []
        let code: CURLcode = errorBuffer.withUnsafeMutableBufferPointer { errorPointer in
            body.withUnsafeBufferPointer { bodyPointer in
                var options = CurlOptions(handle)
                options.base(
                    url: request.url, protocols: "http,https", errorBuffer: errorPointer.baseAddress,
                    connectTimeout: request.connectTimeout, timeout: request.timeout)
                if request.sink == nil {
                    // A streamed body has no size limit: it never sits in memory.
                    options.set(
                        broker_curl_setopt_off(handle, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(request.maxResponseBytes)))
                }
                options.set(broker_curl_setopt_string(handle, CURLOPT_USERAGENT, userAgent))
                if let caFile = request.caFile {
                    options.set(broker_curl_setopt_string(handle, CURLOPT_CAINFO, caFile))
                }
                if request.publicAddressesOnly {
                    options.set(broker_curl_setopt_string(handle, CURLOPT_NOPROXY, "*"))
                    // A connection this handle keeps from another request was never checked: a new one, not kept.
                    options.set(broker_curl_setopt_long(handle, CURLOPT_FRESH_CONNECT, 1))
                    options.set(broker_curl_setopt_long(handle, CURLOPT_FORBID_REUSE, 1))
                    options.set(
                        broker_curl_setopt_opensocket_cb(handle) { user, _, address in
                            guard let user, let address else { return broker_curl_socket_bad() }
                            return Unmanaged<Transfer>.fromOpaque(user).takeUnretainedValue().openSocket(address)
                        })
                    options.set(broker_curl_setopt_pointer(handle, CURLOPT_OPENSOCKETDATA, me))
                }
                options.set(broker_curl_setopt_slist(handle, CURLOPT_HTTPHEADER, headerList))
                if request.followRedirects {
                    options.set(broker_curl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 1))
                    options.set(broker_curl_setopt_long(handle, CURLOPT_MAXREDIRS, 5))
                    let https = lowerURL.hasPrefix("https://")
                    options.set(
                        broker_curl_setopt_string(handle, CURLOPT_REDIR_PROTOCOLS_STR, https ? "https" : "http,https"))
                } else {
                    options.set(broker_curl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 0))
                }

                switch request.method {
                case "GET":
                    options.set(broker_curl_setopt_long(handle, CURLOPT_HTTPGET, 1))
                case "HEAD":
                    options.set(broker_curl_setopt_long(handle, CURLOPT_NOBODY, 1))
                default:
                    options.set(broker_curl_setopt_string(handle, CURLOPT_CUSTOMREQUEST, request.method))
                }
                if request.body != nil || request.method == "POST" {
                    options.set(
                        broker_curl_setopt_off(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(bodyPointer.count)))
                    // libcurl reads the body straight from our buffer, which outlives curl_easy_perform.
                    let bodyAddress = UnsafeMutableRawPointer(mutating: bodyPointer.baseAddress) ?? me
                    options.set(broker_curl_setopt_pointer(handle, CURLOPT_POSTFIELDS, bodyAddress))
                    if request.method == "POST" {
                        options.set(broker_curl_setopt_long(handle, CURLOPT_POST, 1))
                    }
                }

                options.set(
                    broker_curl_setopt_data_cb(
                        handle, CURLOPT_WRITEFUNCTION,
                        { data, size, count, user in
                            guard let user, let data else { return 0 }
                            return Unmanaged<Transfer>.fromOpaque(user).takeUnretainedValue().receiveBody(
                                data, size * count)
                        }))
                options.set(broker_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, me))
                options.set(
                    broker_curl_setopt_data_cb(
                        handle, CURLOPT_HEADERFUNCTION,
                        { data, size, count, user in
                            guard let user, let data else { return 0 }
                            return Unmanaged<Transfer>.fromOpaque(user).takeUnretainedValue().receiveHeader(
                                data, size * count)
                        }))
                options.set(broker_curl_setopt_pointer(handle, CURLOPT_HEADERDATA, me))
                options.set(broker_curl_setopt_long(handle, CURLOPT_NOPROGRESS, 0))
                options.set(
                    broker_curl_setopt_xferinfo_cb(
                        handle,
                        { user, _, _, _, _ in
                            guard let user else { return 0 }
                            return Unmanaged<Transfer>.fromOpaque(user).takeUnretainedValue().cancelled.load(
                                ordering: .relaxed)
                                ? 1 : 0
                        }))
                options.set(broker_curl_setopt_pointer(handle, CURLOPT_XFERINFODATA, me))
                if options.failure != CURLE_OK { return options.failure }
                if cancelled.load(ordering: .relaxed) { return CURLE_ABORTED_BY_CALLBACK }
                return curl_easy_perform(handle)
            }
        }

        guard code == CURLE_OK else {
            if !refusedAddresses.isEmpty {
                return .failure(
                    HTTPClientError(
                        kind: .forbiddenAddress,
                        message: "refusing to connect to \(refusedAddresses.joined(separator: ", ")): not a public "
                            + "address (loopback, private, link-local or reserved)",
                        curlCode: Int(code.rawValue)))
            }
            if sinkClosed {
                return .failure(
                    HTTPClientError(
                        kind: .transport, message: "the response body could not be written: the output was closed",
                        curlCode: Int(code.rawValue)))
            }
            return .failure(
                Transfer.error(
                    for: code, message: CurlOptions.message(code, errorBuffer: errorBuffer), tooLarge: tooLarge))
        }
        var status = 0
        _ = broker_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        var response = HTTPClientResponse(status: status, headers: parseHeaders(), body: self.body)
        response.statusLine = statusLine
        response.streamed = streaming
        var location: UnsafeMutablePointer<CChar>?
        if broker_curl_getinfo_string(handle, CURLINFO_REDIRECT_URL, &location) == CURLE_OK, let location {
            response.redirectURL = String(cString: location)
        }
        return .success(response)
    }

    private func receiveBody(_ data: UnsafeMutablePointer<CChar>, _ length: Int) -> Int {
        if streaming, let sink = request.sink {
            guard sink.write(UnsafeRawBufferPointer(start: data, count: length)) else {
                sinkClosed = true
                return 0
            }
            return length
        }
        guard body.count + length <= request.maxResponseBytes else {
            tooLarge = true
            return 0
        }
        body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: length))
        return length
    }

    private func receiveHeader(_ data: UnsafeMutablePointer<CChar>, _ length: Int) -> Int {
        let line = String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
        // A status line starts a new response (after a redirect or a 1xx): keep only the last one's fields.
        if line.hasPrefix("HTTP/") {
            headerLines.removeAll()
            body.removeAll()
            streaming = false
            statusLine = String(line.prefix { !$0.isNewline })
        } else if line == "\r\n" || line == "\n" {
            beginBody()
        } else {
            headerLines.append(line)
        }
        guard headerLines.count <= 200 else {
            tooLarge = true
            return 0
        }
        return length
    }

    /// The head is complete: ask the sink whether it takes this response's body.
    private func beginBody() {
        guard let sink = request.sink else { return }
        let fields = statusLine.split(separator: " ", maxSplits: 2)
        let status = fields.count >= 2 ? Int(fields[1]) ?? 0 : 0
        let headers = parseHeaders()
        if (100..<200).contains(status) { return }
        let followed = request.followRedirects && (300..<400).contains(status)
        if followed && headers.contains(where: { $0.name.lowercased() == "location" }) { return }
        streaming = sink.begin(statusLine: statusLine, status: status, headers: headers)
    }

    private func parseHeaders() -> [(name: String, value: String)] {
        headerLines.compactMap { line in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            let name = String(line[..<colon])
            let value = line[line.index(after: colon)...].trimmingWhitespace()
            return (name, value)
        }
    }

    private static func error(for code: CURLcode, message: String, tooLarge: Bool) -> HTTPClientError {
        let kind: HTTPClientError.Kind
        switch code {
        case _ where tooLarge, CURLE_FILESIZE_EXCEEDED:
            return HTTPClientError(
                kind: .responseTooLarge, message: "response larger than the limit", curlCode: Int(code.rawValue))
        case CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT: kind = .invalidURL
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY: kind = .resolveFailed
        case CURLE_COULDNT_CONNECT: kind = .connectionFailed
        case CURLE_OPERATION_TIMEDOUT: kind = .timeout
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER,
            CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH:
            kind = .tls
        case CURLE_TOO_MANY_REDIRECTS: kind = .tooManyRedirects
        case CURLE_ABORTED_BY_CALLBACK: kind = .cancelled
        default: kind = .transport
        }
        return HTTPClientError(kind: kind, message: message, curlCode: Int(code.rawValue))
    }
}

extension Substring {
    func trimmingWhitespace() -> String {
        var slice = self[...]
        while let first = slice.first, first.isWhitespace { slice = slice.dropFirst() }
        while let last = slice.last, last.isWhitespace { slice = slice.dropLast() }
        return String(slice)
    }
}
