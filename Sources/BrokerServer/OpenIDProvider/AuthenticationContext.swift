package import BrokerCore

/// How strongly a user signed in, as id tokens and access tokens say it (OpenID Connect Core 2: `acr`, `amr`).
///
/// `acr` is one of broker's two levels, published as `acr_values_supported`: `1`, one factor (a password, or a
/// provider's word); `2`, two factors (a password and a second factor's code, or a passkey, which broker always
/// asks to verify its user — possession and a PIN or biometric). `amr` carries RFC 8176's registered values only, and is left out when none fits: a
/// provider's sign-in is said by `idp`, not by an unregistered `fed`.
package enum AuthenticationContext {
    /// `acr_values_supported`, weakest first.
    package static let levels = ["1", "2"]

    /// The level a sign-in with `way` reached.
    package static func acr(_ way: ProviderID?) -> String { way == .passkey || way == .customOTP ? "2" : "1" }

    /// The level that counts as two factors.
    package static let twoFactors = "2"

    /// RFC 8176 methods of a sign-in with `way`: `pwd` for a password; `pwd`, `otp` and `mfa` for a password
    /// with a code; `pop` (a key's proof of possession) and `mfa` for a user-verified passkey; `nil` for a
    /// provider's or an unknown one.
    package static func amr(_ way: ProviderID?) -> [String]? {
        switch way {
        case .some(.custom): ["pwd"]
        case .some(.customOTP): ["pwd", "otp", "mfa"]
        case .some(.passkey): ["pop", "mfa"]
        default: nil
        }
    }

    /// `acr` and `amr` as claims.
    package static func claims(_ way: ProviderID?) -> [String: JSONValue] {
        var claims: [String: JSONValue] = ["acr": .string(acr(way))]
        if let methods = amr(way) { claims["amr"] = .array(methods.map(JSONValue.string)) }
        return claims
    }

    /// Whether a sign-in at `acr` is what the request insists on: an essential `acr` in the `claims` parameter
    /// with values (Core 5.5.1.1) is met only by one of them; `acr_values` alone is a preference (Core 3.1.2.1).
    package static func meets(_ claims: ClaimsRequest?, acr: String) -> Bool {
        guard let wanted = claims?.idToken["acr"], wanted.essential, let values = wanted.values else { return true }
        // A higher level than asked for does: a passkey satisfies an app that asks for one factor.
        return values.contains { value in
            guard let asked = levels.firstIndex(of: value), let reached = levels.firstIndex(of: acr) else {
                return value == acr
            }
            return reached >= asked
        }
    }
}
