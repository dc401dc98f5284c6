import BrokerCore
import BrokerStore

/// Step-up at broker's own endpoints (RFC 9470): a request whose token stands for a sign-in weaker or older than
/// the endpoint needs is answered 401 with `WWW-Authenticate: Bearer error="insufficient_user_authentication"`
/// (`DPoP` when the token came as DPoP) naming `acr_values` and/or `max_age`, so that any client — `broker request`
/// and the CLI's account commands among them — can sign in again at that level and retry.
///
/// What asks for more:
/// - **Changing how an account is reached** (a password's change, linking and unlinking, passkeys, recovery codes,
///   deletion) when the account has two factors to give — a second factor or a passkey: the session must have been
///   signed in with two (`acr` 2). A stolen password, or one provider's sign-in, never changes the account of
///   someone who set up more.
/// - **Deleting an account without a password**: a sign-in within ``recent`` seconds (`max_age`).
/// - **An app that requires two factors** (`broker client add --require-mfa`): its tokens from a one-factor
///   sign-in (issued before the app asked for more) get nothing at `/auth/userinfo`.
package enum StepUp {
    /// How recent a sign-in must be where an endpoint asks for a recent one (seconds).
    static let recent: Int64 = 600

    /// What a request lacked.
    package struct Need: Sendable, Equatable {
        /// The `acr` the sign-in must have reached (`nil`: any).
        package var acr: String?
        /// The oldest sign-in accepted, in seconds (`nil`: any).
        package var maxAge: Int64?

        package init(acr: String? = nil, maxAge: Int64? = nil) {
            self.acr = acr
            self.maxAge = maxAge
        }
    }

    /// The 401 that asks for `need`, in the scheme the token was presented in (`authorization`'s).
    package static func challenge(_ need: Need, detail: String, authorization: String?) -> APIError {
        let scheme = authorization.flatMap(AuthorizationCredentials.init)?.isScheme("dpop") == true ? "DPoP" : "Bearer"
        // A quoted-string: no backslash, and double quotes as single ones.
        var quoted = String.UnicodeScalarView()
        for scalar in detail.unicodeScalars where scalar != "\\" { quoted.append(scalar == "\"" ? "'" : scalar) }
        var parameters = ["error=\"insufficient_user_authentication\"", "error_description=\"\(String(quoted))\""]
        if let acr = need.acr { parameters.append("acr_values=\"\(acr)\"") }
        if let maxAge = need.maxAge { parameters.append("max_age=\(maxAge)") }
        if scheme == "DPoP" { parameters.insert("algs=\"\(DPoPChecker.algorithms.joined(separator: " "))\"", at: 0) }
        return APIError(
            status: 401, code: .insufficientUserAuthentication, detail: detail,
            headers: [("WWW-Authenticate", scheme + " " + parameters.joined(separator: ", "))])
    }

    /// What the account's own sign-ins can reach: two factors when it has a second factor or a passkey.
    static func strongest(of user: UserID, store: any Store) async throws -> String {
        if try await store.totpFactor(user: user) != nil { return AuthenticationContext.twoFactors }
        if try await !store.passkeys(user: user).isEmpty { return AuthenticationContext.twoFactors }
        return "1"
    }

    /// Refuses an account change through `view`'s session unless it was signed in as strongly as the account can
    /// be (and, with `maxAge`, recently enough), with the command that signs in again at that level.
    static func requireStrongest(
        _ view: SessionView, authorization: String?, maxAge: Int64? = nil, store: any Store, now: Int64
    ) async throws {
        let reached = AuthenticationContext.acr(view.session.signedInWith)
        var need = Need()
        var reasons: [String] = []
        if reached != AuthenticationContext.twoFactors,
            try await strongest(of: view.user.id, store: store) == AuthenticationContext.twoFactors
        {
            need.acr = AuthenticationContext.twoFactors
            reasons.append(
                "this account has two factors, and a change to it needs a sign-in with both (acr 2): sign in again "
                    + "with the password and its code (broker login --provider custom) or a passkey "
                    + "(broker login --provider passkey)")
        }
        if let maxAge, now - view.session.createdAt > maxAge {
            need.maxAge = maxAge
            let provider = (view.session.signedInWith ?? view.user.id.provider).identityProvider
            reasons.append(
                "this change needs a sign-in within the last \(maxAge / 60) minutes: sign in again "
                    + "(broker login --provider \(provider.rawValue)) and retry")
        }
        guard need != Need() else { return }
        throw challenge(need, detail: reasons.joined(separator: "; "), authorization: authorization)
    }
}
