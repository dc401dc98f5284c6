import BrokerConfiguration
import BrokerCore
import BrokerStore
import HTTPTypes
import Hummingbird
import Logging
import NIOHTTP1

/// Turns every error into the contract's JSON error body, and logs each request without its query,
/// headers or body (where codes, tokens and passwords travel).
///
/// Every response carries `X-Request-Id`: the request's own when it is a sane value (``RequestID``), else a new
/// one; the log line carries it too. Each request is counted in the metrics under its route template. A request
/// with a `DPoP` field is handled with its proofs known (``DPoPRequest/current``).
struct ErrorAndLogMiddleware: RouterMiddleware {
    typealias Context = BrokerRequestContext
    let logger: Logger
    var metrics: BrokerMetrics?
    /// Peers whose `X-Forwarded-For` names the client (`server.trusted_proxies`).
    var trustedProxies = TrustedProxies()

    static let forwardedFor: HTTPField.Name = {
        guard let name = HTTPField.Name("X-Forwarded-For") else { preconditionFailure("a valid field name") }
        return name
    }()

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let started = ContinuousClock.now
        var context = context
        context.requestID = RequestID.accepting(request.headers.value(RequestID.field)) ?? RequestID.make()
        if !trustedProxies.networks.isEmpty {
            context.clientAddress = trustedProxies.client(
                peer: context.remoteAddress?.ipAddress, forwardedFor: request.headers[values: Self.forwardedFor])
        }
        var response: Response
        let origin = RequestOrigin(
            address: context.clientAddress, userAgent: request.headers.value(.userAgent), requestID: context.requestID)
        do {
            response = try await RequestOrigin.$current.withValue(origin) { [context] in
                // The request's DPoP proofs for whatever checks a token (``DPoPRequest/current``), set here rather
                // than by a middleware of their own: a layer costs two trips through the event loop's queue.
                guard let dpop = DPoPRequest(request) else { return try await next(request, context) }
                return try await DPoPRequest.$current.withValue(dpop) { try await next(request, context) }
            }
        } catch let error as APIError {
            response = BrokerHTTPServer.response(error)
        } catch let error as any HTTPResponseError {
            response = BrokerHTTPServer.response(Self.apiError(status: error.status))
        } catch let error as StoreError where error.code == .unavailable {
            // The database is down or slow: the client may retry; the reason goes to the log only.
            logger.error("store unavailable", metadata: ["http.path": "\(request.uri.path)", "error": "\(error)"])
            response = BrokerHTTPServer.response(
                APIError(
                    status: 503, code: .serverError,
                    detail: "the broker's database is unavailable; try again shortly",
                    headers: [("Retry-After", "1")]))
        } catch let error as HTTPParserError {
            // A malformed body (a bad or overflowing chunk size, an unknown transfer coding) is the client's
            // mistake: 400, and not worth more than a debug line.
            logger.debug("malformed request", metadata: ["http.path": "\(request.uri.path)", "error": "\(error)"])
            response = BrokerHTTPServer.response(APIError.invalidRequest("malformed HTTP request body"))
        } catch {
            logger.error(
                "request failed",
                metadata: ["http.path": "\(request.uri.path)", "error": "\(String(describing: type(of: error)))"]
            )
            response = BrokerHTTPServer.response(APIError.serverError)
        }
        let elapsed = ContinuousClock.now - started
        response.headers[RequestID.field] = context.requestID
        // The route template, never the path: `/auth/:provider/start`, or `unmatched` for a 404 of the router.
        let route = context.endpointPath.flatMap { $0 == "NotFound" ? nil : $0 } ?? "unmatched"
        RequestRecord(
            requestID: context.requestID, method: request.method.rawValue, path: request.uri.path, route: route,
            status: response.status.code
        ).finish(logger: logger, metrics: metrics, elapsed: elapsed)
        return response
    }

    static func apiError(status: HTTPResponse.Status) -> APIError {
        switch status.code {
        case 404: APIError.notFound("no such endpoint")
        case 405: APIError.methodNotAllowed("method not allowed on this endpoint")
        case 413: APIError.payloadTooLarge(limit: RequestInput.maxBodySize)
        case 400..<500: APIError(status: status.code, code: .invalidRequest, detail: status.reasonPhrase)
        default: APIError.serverError
        }
    }
}

/// What every answered request leaves behind: its metrics under its route template and its log line (without
/// query, headers or body). One place, for the router's way (``ErrorAndLogMiddleware``) and the constant
/// documents' (``ConstantDocumentHandler``).
struct RequestRecord {
    let requestID: String
    let method: String
    let path: String
    /// The route template, never the path (bounded labels).
    let route: String
    let status: Int

    func finish(logger: Logger, metrics: BrokerMetrics?, elapsed: Duration) {
        finish(
            logger: logger, recorder: metrics?.requestRecorder(route: route, method: method, status: status),
            elapsed: elapsed)
    }

    /// The same, with the request's metrics looked up already (they must be this route's, method's and status's).
    func finish(logger: Logger, recorder: BrokerMetrics.RequestRecorder?, elapsed: Duration) {
        recorder?.record(elapsed)
        logger.info(
            "request",
            metadata: [
                "request_id": "\(requestID)",
                "http.method": "\(method)",
                "http.path": "\(path.prefix(200))",
                "http.status": "\(status)",
                "duration_ms":
                    "\(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)",
            ]
        )
    }
}
