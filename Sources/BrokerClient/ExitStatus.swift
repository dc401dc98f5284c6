import BrokerCore

/// The contract's exit codes (CONTRACT.md "Exit codes"), and the one mapping from a client-side error to
/// its code: every command ends through ``of(_:)`` or a usage check, never a code chosen on the spot.
package enum ExitStatus: Int32, Sendable {
    case success = 0
    /// Network, server, bad response, timeout; a sign-in that failed in `login` or `register`.
    case failure = 1
    /// A command that needs a session or credentials found none valid.
    case authenticationRequired = 4
    /// A usage error (including an unknown provider id).
    case usage = 64

    /// The exit code for `error`.
    ///
    /// - Parameter signingIn: the command is `login` or `register`, where a refusal (wrong password, a
    ///   denied or failed sign-in) is a failed sign-in (1), not a missing session (4).
    package static func of(_ error: any Error, signingIn: Bool = false) -> ExitStatus {
        switch error {
        case let error as SessionError:
            switch error {
            case .signedOut, .rejected, .cache(.unreadable), .cache(.keyring):
                signingIn ? .failure : .authenticationRequired
            case .cache(.io): .failure
            case .broker(let api): of(api, signingIn: signingIn)
            }
        case let error as BrokerAPIError:
            error.refusesCredentials && !signingIn ? .authenticationRequired : .failure
        case let error as LoopbackSignIn.Failure:
            switch error {
            case .session(let session): of(session, signingIn: true)
            default: .failure
            }
        case let error as AuthenticatedRequest.Failure:
            if case .signInFailed(let inner) = error { of(inner, signingIn: signingIn) } else { error.status }
        case let error as ClientSettings.Problem:
            error.isUsage ? .usage : .failure
        default:
            .failure
        }
    }
}

extension BrokerAPIError {
    /// The broker refused the credentials presented (RFC 6749 §5.2 codes, RFC 6750 `invalid_token`, the
    /// contract's `invalid_credentials`): authentication is required again, not a retry.
    package var refusesCredentials: Bool {
        guard case .rejected(let status, let code, _) = self else { return false }
        return status == 401 || OAuthErrorCode.credentialRefusals.contains(code)
    }

    /// A wrong email or password at `/auth/login`.
    package var isWrongPassword: Bool {
        if case .rejected(_, .invalidCredentials, _) = self { return true }
        return false
    }

    /// The broker asked to come back later (throttle or a busy hashing pool).
    package var isTooManyRequests: Bool {
        if case .rejected(_, .tooManyRequests, _) = self { return true }
        return false
    }

}
