internal import CCurl

/// The options of one easy handle, set in order; the first failure is kept (and the exchange not started).
///
/// ``base(url:protocols:errorBuffer:connectTimeout:timeout:)`` holds what every exchange of ours sets —
/// HTTP or SMTP — in one place: above all, TLS verification, which is always on.
struct CurlOptions {
    let handle: UnsafeMutableRawPointer
    private(set) var failure = CURLE_OK

    init(_ handle: UnsafeMutableRawPointer) { self.handle = handle }

    mutating func set(_ result: CURLcode) {
        if result != CURLE_OK && failure == CURLE_OK { failure = result }
    }

    /// The URL, the error buffer, no signals (threads), only `protocols` (redirects included), the timeouts,
    /// and certificate and host-name verification — deliberately without a switch to turn them off.
    mutating func base(
        url: String, protocols: String, errorBuffer: UnsafeMutablePointer<CChar>?, connectTimeout: Duration,
        timeout: Duration
    ) {
        set(broker_curl_setopt_string(handle, CURLOPT_URL, url))
        set(broker_curl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, UnsafeMutableRawPointer(errorBuffer)))
        set(broker_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1))
        set(broker_curl_setopt_string(handle, CURLOPT_PROTOCOLS_STR, protocols))
        set(broker_curl_setopt_long(handle, CURLOPT_SSL_VERIFYPEER, 1))
        set(broker_curl_setopt_long(handle, CURLOPT_SSL_VERIFYHOST, 2))
        set(broker_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, Self.milliseconds(connectTimeout)))
        set(broker_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, Self.milliseconds(timeout)))
    }

    /// libcurl's message for a failed exchange: its error buffer's, else the code's generic one.
    static func message(_ code: CURLcode, errorBuffer: [CChar]) -> String {
        let detail = String(decoding: errorBuffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
    }

    static func milliseconds(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        return max(1, Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000))
    }
}
