package import BrokerCore

/// An error the API answers with: the contract's `{"error", "error_description"}` body, its status, and
/// any header the error needs (`Retry-After`, `WWW-Authenticate`).
///
/// The one place where errors become responses (STYLE.md 7): handlers throw these; anything else thrown is
/// answered with a bare `server_error` and logged, never echoed.
package struct APIError: Error, Sendable, CustomStringConvertible {
    package let status: Int
    package let code: OAuthErrorCode
    package let detail: String
    package let headers: [(String, String)]

    package init(status: Int, code: OAuthErrorCode, detail: String, headers: [(String, String)] = []) {
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers
    }

    package var description: String { "\(status) \(code): \(detail)" }

    package var body: JSONValue { ErrorResponse(code: code, description: detail).json }

    package static func invalidRequest(_ detail: String) -> APIError {
        APIError(status: 400, code: .invalidRequest, detail: detail)
    }
    package static func invalidGrant(_ detail: String) -> APIError {
        APIError(status: 400, code: .invalidGrant, detail: detail)
    }
    package static func unsupportedGrantType(_ detail: String) -> APIError {
        APIError(status: 400, code: .unsupportedGrantType, detail: detail)
    }
    package static let invalidCredentials = APIError(
        status: 401,
        code: .invalidCredentials,
        detail: "the email or the password is not right"
    )
    /// The password was right and the account has a second factor: ask again with its code (`otp`).
    package static let mfaRequired = APIError(
        status: 401, code: .mfaRequired,
        detail: "this account has a second factor: give the code the authenticator app shows (or a recovery code)")
    /// `server.require_mfa` and the account has no second factor yet.
    package static let mfaEnrollmentRequired = APIError(
        status: 403, code: .mfaEnrollmentRequired,
        detail: "this broker requires a second factor and the account has none: add one first "
            + "(broker mfa totp add --email ADDRESS)")
    package static func invalidClient(_ detail: String) -> APIError {
        APIError(
            status: 401, code: .invalidClient, detail: detail,
            headers: [("WWW-Authenticate", "Basic realm=\"broker\"")])
    }
    package static func invalidToken(_ detail: String) -> APIError {
        APIError(
            status: 401,
            code: .invalidToken,
            detail: detail,
            headers: [("WWW-Authenticate", "Bearer error=\"invalid_token\"")]
        )
    }
    package static func accessDenied(_ detail: String) -> APIError {
        APIError(status: 403, code: .accessDenied, detail: detail)
    }
    package static func notFound(_ detail: String) -> APIError {
        APIError(status: 404, code: .notFound, detail: detail)
    }
    package static func methodNotAllowed(_ detail: String) -> APIError {
        APIError(status: 405, code: .invalidRequest, detail: detail)
    }
    /// A disabled user (`broker users disable`) cannot start a session.
    package static let accountDisabled = APIError(
        status: 403, code: .accountDisabled, detail: "this account is disabled; ask the broker's operator")
    package static let accountExists = APIError(
        status: 409,
        code: .accountExists,
        detail: "an account with this email already exists"
    )
    /// A change that lost a race with another (409).
    package static func conflict(_ detail: String) -> APIError {
        APIError(status: 409, code: .conflict, detail: detail)
    }
    package static func payloadTooLarge(limit: Int) -> APIError {
        APIError(status: 413, code: .payloadTooLarge, detail: "request bodies are limited to \(limit) bytes")
    }
    package static func unsupportedMediaType(_ detail: String) -> APIError {
        APIError(status: 415, code: .invalidRequest, detail: detail)
    }
    package static func tooManyRequests(retryAfter seconds: Int64, _ detail: String) -> APIError {
        APIError(
            status: 429,
            code: .tooManyRequests,
            detail: detail,
            headers: [("Retry-After", String(max(1, seconds)))]
        )
    }
    package static let serverError = APIError(status: 500, code: .serverError, detail: "internal error")
    package static func serviceUnavailable(_ detail: String) -> APIError {
        APIError(status: 503, code: .serverError, detail: detail)
    }
}
