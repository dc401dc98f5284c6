package import BrokerCore
package import BrokerHTTP

/// An API's (or the broker's) request for a stronger or more recent sign-in (RFC 9470): a 401 whose
/// `WWW-Authenticate` says `error="insufficient_user_authentication"`, with `acr_values` and/or `max_age`.
///
/// broker's own levels are `1` (one factor) and `2` (two: a password with its code, or a passkey); a sign-in at
/// `2` meets an API that asks for `1` or `2`.
package struct StepUpChallenge: Sendable, Equatable {
    /// The `acr` values the API accepts, as it listed them (space-separated in the challenge).
    package var acrValues: [String]
    /// The oldest sign-in the API accepts, in seconds.
    package var maxAge: Int64?
    /// The challenge's `error_description`, when it gave one.
    package var description: String?

    package init(acrValues: [String], maxAge: Int64?, description: String? = nil) {
        self.acrValues = acrValues
        self.maxAge = maxAge
        self.description = description
    }

    /// The challenge in a refusal, when it is one.
    package init?(_ response: HTTPClientResponse) {
        guard response.status == 401, let header = response.header("WWW-Authenticate") else { return nil }
        self.init(header: header)
    }

    /// The challenge in a `WWW-Authenticate` value, when it is one.
    package init?(header: String) {
        guard AuthenticatedRequest.parameter("error", in: header) == "insufficient_user_authentication" else {
            return nil
        }
        acrValues =
            AuthenticatedRequest.parameter("acr_values", in: header)?.split(separator: " ").map(String.init) ?? []
        maxAge = AuthenticatedRequest.parameter("max_age", in: header).flatMap { Int64($0) }.flatMap {
            $0 >= 0 ? $0 : nil
        }
        description = AuthenticatedRequest.parameter("error_description", in: header).map {
            String($0.prefix(300))
        }
    }

    /// Whether only a sign-in with two factors meets it: the API lists `2` and not `1`. (An API that lists values
    /// broker does not issue cannot be met by any sign-in here; the retry then shows its refusal.)
    package var wantsTwoFactors: Bool {
        acrValues.contains(AuthenticationContextLevels.two) && !acrValues.contains(AuthenticationContextLevels.one)
    }

    /// What the API asked for, in words.
    package var wanted: String {
        var text = wantsTwoFactors ? "a sign-in with two factors (acr 2)" : "a new sign-in"
        if let maxAge { text += " made within the last \(maxAge) seconds" }
        return text
    }

    /// The command that signs in as asked, for a session that was started with `provider`.
    package func command(provider: ProviderID?) -> String {
        guard wantsTwoFactors else {
            return "sign in again with broker login --provider \((provider ?? .custom).identityProvider.rawValue)"
        }
        switch provider?.identityProvider {
        case .some(.custom):
            return "sign in with the password and its code (broker login --provider custom)"
        case .some(.passkey):
            return "sign in with a passkey (broker login --provider passkey)"
        default:
            return "sign in with the password and its code (broker login --provider custom) or a passkey "
                + "(broker login --provider passkey)"
        }
    }

    /// Whether an access token's claims (`acr`, `auth_time`) meet it at `now`.
    package func isMet(byClaims claims: [String: JSONValue], now: Int64) -> Bool {
        if wantsTwoFactors, claims["acr"]?.stringValue != AuthenticationContextLevels.two { return false }
        if let maxAge {
            guard let authTime = claims["auth_time"]?.intValue, now - authTime <= maxAge else { return false }
        }
        return true
    }
}

/// broker's `acr` levels as the client names them (the server's `AuthenticationContext.levels`).
package enum AuthenticationContextLevels {
    package static let one = "1"
    package static let two = "2"
}
