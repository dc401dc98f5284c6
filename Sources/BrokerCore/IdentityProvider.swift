/// Who a provider says signed in: its stable subject and what it tells about the person.
package struct Identity: Sendable, Hashable {
    /// The provider's stable account id (OIDC `sub`, Microsoft `tid`+`oid`, Facebook/Twitter numeric id):
    /// never an email or a user name, which can change hands.
    package var subject: String
    /// Shown only when the provider says it is verified.
    package var email: String?
    package var emailVerified: Bool
    package var name: String?
    /// What else the provider says of the account that the broker records with the sign-in (Apple's
    /// `is_private_email`, `real_user_status`): short words, never secrets.
    package var details: [String: String]
    /// The standard claims (OpenID Connect Core 5.1) the provider gives beside the name, which broker passes on
    /// to apps under `profile`: ``Identity/profileClaims``.
    package var profile: [String: String]

    package init(
        subject: String, email: String?, emailVerified: Bool, name: String?, details: [String: String] = [:],
        profile: [String: String] = [:]
    ) {
        self.subject = subject
        self.email = email
        self.emailVerified = emailVerified
        self.name = name
        self.details = details
        self.profile = profile
    }

    /// The standard claims broker keeps of a provider's account, beside `name` and `email`.
    package static let profileClaims = ["given_name", "family_name", "preferred_username", "picture", "locale"]

    /// The string values of those claims in `claims` (an ID token's, userinfo's). Whether each is fit to keep is
    /// decided once, where every provider's sign-in passes (``profileValue(_:_:)``).
    package static func profile(from claims: [String: JSONValue]) -> [String: String] {
        var profile: [String: String] = [:]
        for name in profileClaims {
            if let value = claims[name]?.stringValue { profile[name] = value }
        }
        return profile
    }

    /// `value` as the claim `name` is kept — at most 512 bytes, without control characters, and for `picture` an
    /// https URL — or `nil` when it is not fit to pass on.
    package static func profileValue(_ name: String, _ value: String) -> String? {
        guard !value.isEmpty, value.utf8.count <= 512,
            !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else { return nil }
        if name == "picture" && !value.lowercased().hasPrefix("https://") { return nil }
        return value
    }
}

/// How a provider sends the browser back to the broker's callback.
package enum CallbackMethod: Sendable {
    /// A redirect: `GET /auth/{id}/callback?code=…&state=…`.
    case query
    /// `response_mode=form_post`: a page at the provider posts the answer to `/auth/{id}/callback` (Sign in with
    /// Apple) — a cross-site POST, which carries no `SameSite=Lax` cookie.
    case formPost
}

/// One browser sign-in in progress at the broker: what the broker sent the provider, kept (sealed) until
/// the provider sends the browser back.
package struct PendingSignIn: Sendable, Hashable {
    /// The broker's own `state` parameter towards the provider.
    package var state: String
    /// The OIDC `nonce` the ID token must carry.
    package var nonce: String
    /// The PKCE verifier of the broker's request to the provider.
    package var codeVerifier: String
    /// The broker's callback URL (`{issuer}/auth/{provider}/callback`): the provider's `redirect_uri`.
    package var callbackURL: String

    package init(state: String, nonce: String, codeVerifier: String, callbackURL: String) {
        self.state = state
        self.nonce = nonce
        self.codeVerifier = codeVerifier
        self.callbackURL = callbackURL
    }
}

/// Why a provider sign-in did not produce an ``Identity``.
package enum ProviderError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The provider (or the person) said no: `access_denied` and friends, passed on to the CLI.
    case denied(code: String, description: String)
    /// The provider's answer broke the protocol (bad signature, wrong audience, nonce mismatch, …).
    case invalidResponse(String)
    /// The provider could not be reached or answered with an error status.
    case unavailable(String)

    package var description: String {
        switch self {
        case .denied(let code, let description): description.isEmpty ? code : "\(code): \(description)"
        case .invalidResponse(let why): "the provider's answer is not acceptable: \(why)"
        case .unavailable(let why): "the provider could not be reached: \(why)"
        }
    }
}

/// Where to send the browser, and what the module needs back at the callback (OAuth 1.0a's request-token
/// secret): the broker seals `carry` into a short-lived cookie scoped to the callback path.
package struct AuthorizationStart: Sendable {
    package var url: String
    package var carry: [String: String]

    package init(url: String, carry: [String: String] = [:]) {
        self.url = url
        self.carry = carry
    }
}

/// A sign-in provider module (Providers/<Name>): builds the authorization redirect for a pending sign-in and
/// turns the provider's callback into an ``Identity``. Modules know nothing of HTTP servers or storage.
package protocol IdentityProvider: Sendable {
    var id: ProviderID { get }

    /// How the provider answers at the callback; ``CallbackMethod/query`` unless the module says otherwise.
    var callbackMethod: CallbackMethod { get }

    /// Where to send the browser for `pending`.
    func authorizationURL(for pending: PendingSignIn) async throws(ProviderError) -> String

    /// Completes the sign-in from the callback's query parameters (the broker has already checked `state`).
    func complete(callback: [String: String], pending: PendingSignIn) async throws(ProviderError) -> Identity

    /// ``authorizationURL(for:)`` with state to carry to the callback; the default carries nothing.
    func start(for pending: PendingSignIn) async throws(ProviderError) -> AuthorizationStart

    /// ``complete(callback:pending:)`` with what ``start(for:)`` carried.
    func complete(callback: [String: String], pending: PendingSignIn, carry: [String: String])
        async throws(ProviderError)
        -> Identity
}

extension IdentityProvider {
    package var callbackMethod: CallbackMethod { .query }

    package func start(for pending: PendingSignIn) async throws(ProviderError) -> AuthorizationStart {
        AuthorizationStart(url: try await authorizationURL(for: pending))
    }

    package func complete(callback: [String: String], pending: PendingSignIn, carry: [String: String])
        async throws(ProviderError) -> Identity
    {
        try await complete(callback: callback, pending: pending)
    }
}
