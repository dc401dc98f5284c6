import BrokerCore
import BrokerCrypto
import HTTPTypes
import Hummingbird
import NIOCore

/// The Prometheus text exposition: the metrics, with the gauges read when it is asked for (the signing key's
/// age, the password-hash queue's depth).
package struct MetricsExposition: Sendable {
    let metrics: BrokerMetrics
    let tokens: TokenIssuer
    let hashingPool: HashingPool

    package func bytes() -> [UInt8] {
        metrics.exposition(
            signingKeyCreatedAt: tokens.keys.current.ring.current.createdAt, hashQueueDepth: hashingPool.queued,
            now: tokens.now)
    }
}

extension BrokerHTTPServer {
    /// The Prometheus text exposition; with a token configured, only for `Authorization: Bearer <token>`
    /// (compared in constant time).
    static func metricsResponse(_ request: Request, exposition: MetricsExposition, token: Secret?) -> Response {
        if let token {
            let presented = request.headers.value(.authorization).flatMap { header -> String? in
                header.utf8.starts(with: "Bearer ".utf8) ? String(header.dropFirst(7)) : nil
            }
            guard let presented, ConstantTime.equals(presented, token.exposed) else {
                var response = response(APIError.invalidToken("the metrics token is required"))
                response.headers[.wwwAuthenticate] = "Bearer realm=\"metrics\""
                return response
            }
        }
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
        headers[.cacheControl] = "no-store"
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: exposition.bytes())))
    }
}
