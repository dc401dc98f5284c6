import BrokerCore
import HTTPTypes
import Hummingbird

/// Makes a request's DPoP proofs known to whatever checks an access token while it is handled
/// (``DPoPRequest/current``): every endpoint that takes a user's access token takes a bound one with its proof.
/// Requests without a `DPoP` header pass untouched.
struct DPoPContextMiddleware: RouterMiddleware {
    typealias Context = BrokerRequestContext

    /// Every `DPoP` field is kept (RFC 9449 §4.1: exactly one is allowed; the checker says so). Made once: this
    /// runs for every request.
    static let field: HTTPField.Name = {
        guard let name = HTTPField.Name(DPoPChecker.header) else { preconditionFailure("DPoP is a valid field name") }
        return name
    }()

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        let proofs = request.headers[values: Self.field]
        guard !proofs.isEmpty else { return try await next(request, context) }
        return try await DPoPRequest.$current.withValue(
            DPoPRequest(proofs: proofs, method: request.method.rawValue, path: request.uri.path)
        ) { try await next(request, context) }
    }
}
