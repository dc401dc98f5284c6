import HTTPTypes
import Hummingbird

/// A request's DPoP proofs, made known to whatever checks an access token while it is handled
/// (``DPoPRequest/current``): every endpoint that takes a user's access token takes a bound one with its proof.
///
/// ``ErrorAndLogMiddleware`` sets it around the rest of the request (it was a middleware of its own until the
/// eleventh session: each middleware layer costs every routed request two trips through its event loop's queue).
extension DPoPRequest {
    /// Every `DPoP` field is kept (RFC 9449 §4.1: exactly one is allowed; the checker says so). Made once: this
    /// is read for every request.
    static let field: HTTPField.Name = {
        guard let name = HTTPField.Name(DPoPChecker.header) else { preconditionFailure("DPoP is a valid field name") }
        return name
    }()

    /// The request's DPoP fields, method and path; `nil` without a `DPoP` field (the request passes untouched).
    init?(_ request: Request) {
        let proofs = request.headers[values: Self.field]
        guard !proofs.isEmpty else { return nil }
        self.init(proofs: proofs, method: request.method.rawValue, path: request.uri.path)
    }
}
