/// The `error` codes of the broker's API, one vocabulary for the server that answers them and the client that
/// reads them: RFC 6749 §5.2 and §4.1.2.1, RFC 6750 §3.1, RFC 8628 §3.5, RFC 9449 (DPoP), OpenID Connect
/// Core §3.1.2.6, and the contract's own. A code the client does not know reads as itself (a newer broker may
/// answer one); comparisons are of codes, never of strings.
package struct OAuthErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    package let rawValue: String

    package init(rawValue: String) { self.rawValue = rawValue }
    package init(_ rawValue: String) { self.rawValue = rawValue }

    package var description: String { rawValue }

    // RFC 6749
    package static let invalidRequest = Self("invalid_request")
    package static let invalidClient = Self("invalid_client")
    package static let invalidGrant = Self("invalid_grant")
    package static let unauthorizedClient = Self("unauthorized_client")
    package static let unsupportedGrantType = Self("unsupported_grant_type")
    package static let unsupportedResponseType = Self("unsupported_response_type")
    package static let invalidScope = Self("invalid_scope")
    package static let accessDenied = Self("access_denied")
    package static let serverError = Self("server_error")
    package static let temporarilyUnavailable = Self("temporarily_unavailable")
    // RFC 6750
    package static let invalidToken = Self("invalid_token")
    package static let insufficientScope = Self("insufficient_scope")
    // RFC 8628
    package static let authorizationPending = Self("authorization_pending")
    package static let slowDown = Self("slow_down")
    package static let expiredToken = Self("expired_token")
    // RFC 9449
    package static let invalidDPoPProof = Self("invalid_dpop_proof")
    package static let useDPoPNonce = Self("use_dpop_nonce")
    // OpenID Connect, PAR
    package static let loginRequired = Self("login_required")
    package static let consentRequired = Self("consent_required")
    package static let invalidRequestURI = Self("invalid_request_uri")
    package static let requestNotSupported = Self("request_not_supported")
    package static let requestURINotSupported = Self("request_uri_not_supported")
    package static let invalidRequestObject = Self("invalid_request_object")
    package static let interactionRequired = Self("interaction_required")
    /// OpenID Connect Core Unmet Authentication Requirements 1.0: the sign-in did not reach what the request
    /// insisted on (an essential `acr`).
    package static let unmetAuthenticationRequirements = Self("unmet_authentication_requirements")
    // The contract's own
    package static let invalidCredentials = Self("invalid_credentials")
    package static let accountDisabled = Self("account_disabled")
    package static let accountExists = Self("account_exists")
    package static let emailNotVerified = Self("email_not_verified")
    package static let alreadyLinked = Self("already_linked")
    package static let lastIdentity = Self("last_identity")
    package static let reauthenticationRequired = Self("reauthentication_required")
    /// The password was right; the account's second factor is asked for next (issue "A second factor").
    package static let mfaRequired = Self("mfa_required")
    /// `server.require_mfa`, and the account has no second factor to ask for yet.
    package static let mfaEnrollmentRequired = Self("mfa_enrollment_required")
    /// RFC 9470: the sign-in behind the token is not strong enough (or not recent enough) for this.
    package static let insufficientUserAuthentication = Self("insufficient_user_authentication")
    package static let notFound = Self("not_found")
    package static let conflict = Self("conflict")
    package static let methodNotAllowed = Self("method_not_allowed")
    package static let payloadTooLarge = Self("payload_too_large")
    package static let unsupportedMediaType = Self("unsupported_media_type")
    package static let tooManyRequests = Self("too_many_requests")
    package static let serviceUnavailable = Self("service_unavailable")

    /// The broker no longer accepts the session: its refresh token is spent, revoked or expired, or its
    /// access token is. The client drops the session (after checking that no other writer rotated it).
    package static let sessionRefusals: Set<Self> = [.invalidGrant, .invalidToken]

    /// The broker refused the credentials presented — a session, a client, a password, a scope the session
    /// may not have: a command that needed them exits 4 (authentication required), not 1 (a failure worth
    /// retrying). Every session refusal is one. With any 401, the one set that decides it.
    package static let credentialRefusals: Set<Self> = sessionRefusals.union([
        .invalidClient, .invalidScope, .unauthorizedClient, .invalidCredentials,
    ])
}
