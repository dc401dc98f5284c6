package import BrokerCore
import BrokerCrypto

/// A browser sign-in in progress, as the broker seals it into its own `state` towards the provider: nothing is
/// stored until the provider has vouched for someone.
///
/// Sealed with AES-256-GCM under the broker's flow key, the provider id as associated data (a state from one
/// provider's start cannot complete another's). One encoder and one decoder, here.
package struct SealedSignIn: Sendable, Hashable {
    /// What the sign-in is for, and so which service finishes it (issue "Rooms for the next floor": one value,
    /// not a set of optionals that had to agree).
    package enum Purpose: Sendable, Hashable {
        /// The CLI's loopback sign-in: a code for ``SealedSignIn/redirectURI``.
        case loopback
        /// `broker link`: the provider account is attached to `user`, while `session` (the one that asked, a
        /// ``LinkTicket``'s) is live; also ends at the CLI's loopback.
        case link(user: UserID, session: String)
        /// The device flow: the authorization with `userCode`; `binding` is the digest of the cookie set in the
        /// browser that typed the code (RT2-4), so the callback completes only there. Ends in the broker's
        /// confirmation page.
        case device(userCode: String, binding: String)
        /// An app's sign-in (`/auth/authorize`): the sealed ``AuthorizationRequest`` the callback goes on with;
        /// `binding` is the digest of the cookie set in the browser that chose the provider (RT3-2), so that an
        /// attacker's own callback URL, opened by someone else, cannot sign that browser in as the attacker.
        case app(request: String, binding: String)
    }

    /// The CLI's own `state`, handed back to its loopback listener (empty but for `.loopback` and `.link`).
    var cliState: String
    /// The CLI's PKCE S256 challenge, bound to the one-time code.
    var codeChallenge: String
    /// The CLI's loopback redirect URI.
    var redirectURI: String
    /// The OIDC nonce the provider's ID token must carry.
    var nonce: String
    /// The PKCE verifier of the broker's own request to the provider.
    var providerVerifier: String
    /// Seconds since the epoch after which the sign-in is refused.
    var expiresAt: Int64
    /// The single-use marker, spent in the store when the sign-in completes.
    package var marker: String
    var purpose: Purpose = .loopback

    package init(
        cliState: String, codeChallenge: String, redirectURI: String, nonce: String, providerVerifier: String,
        expiresAt: Int64, marker: String, purpose: Purpose = .loopback
    ) {
        self.cliState = cliState
        self.codeChallenge = codeChallenge
        self.redirectURI = redirectURI
        self.nonce = nonce
        self.providerVerifier = providerVerifier
        self.expiresAt = expiresAt
        self.marker = marker
        self.purpose = purpose
    }

    /// Longest sealed state accepted back (a bound on work before any check).
    static let maxSealedLength = 12_288

    private enum Field: String {
        case cliState = "s", codeChallenge = "c", redirectURI = "r", nonce = "n", providerVerifier = "v"
        case expiresAt = "e", marker = "m", linkUser = "l", deviceUserCode = "d", linkSession = "k"
        case deviceBinding = "b", appRequest = "a"
    }

    /// The sealed, base64url form.
    package func seal(key: [UInt8], provider: ProviderID) throws -> String {
        var fields: [String: JSONValue] = [
            Field.cliState.rawValue: .string(cliState), Field.codeChallenge.rawValue: .string(codeChallenge),
            Field.redirectURI.rawValue: .string(redirectURI), Field.nonce.rawValue: .string(nonce),
            Field.providerVerifier.rawValue: .string(providerVerifier), Field.expiresAt.rawValue: .int(expiresAt),
            Field.marker.rawValue: .string(marker),
        ]
        switch purpose {
        case .loopback: break
        case .link(let user, let session):
            fields[Field.linkUser.rawValue] = .string(user.description)
            fields[Field.linkSession.rawValue] = .string(session)
        case .device(let userCode, let binding):
            fields[Field.deviceUserCode.rawValue] = .string(userCode)
            fields[Field.deviceBinding.rawValue] = .string(binding)
        case .app(let request, let binding):
            fields[Field.appRequest.rawValue] = .string(request)
            fields[Field.deviceBinding.rawValue] = .string(binding)
        }
        return Base64URL.encode(
            try AESGCM.seal(
                JSONValue.object(fields).serializedBytes, key: key, associatedData: Array(provider.rawValue.utf8)))
    }

    /// Opens a sealed state; `nil` when it is malformed, tampered with, sealed for another provider or key, or
    /// names more than one purpose (or half of one).
    package static func open(_ sealed: String, key: [UInt8], provider: ProviderID) -> SealedSignIn? {
        guard sealed.utf8.count <= maxSealedLength, let box = Base64URL.decode(sealed),
            let opened = AESGCM.open(box, key: key, associatedData: Array(provider.rawValue.utf8)),
            let fields = JSONValue.parse(opened)?.objectValue,
            let cliState = fields[Field.cliState.rawValue]?.stringValue,
            let codeChallenge = fields[Field.codeChallenge.rawValue]?.stringValue,
            let redirectURI = fields[Field.redirectURI.rawValue]?.stringValue,
            let nonce = fields[Field.nonce.rawValue]?.stringValue,
            let providerVerifier = fields[Field.providerVerifier.rawValue]?.stringValue,
            let expiresAt = fields[Field.expiresAt.rawValue]?.intValue,
            let marker = fields[Field.marker.rawValue]?.stringValue,
            let purpose = Self.purpose(fields)
        else { return nil }
        return SealedSignIn(
            cliState: cliState, codeChallenge: codeChallenge, redirectURI: redirectURI, nonce: nonce,
            providerVerifier: providerVerifier, expiresAt: expiresAt, marker: marker, purpose: purpose)
    }

    /// The purpose the fields name: none of the purpose fields is `.loopback`; a link needs its user and its
    /// session (RT2-1), a device sign-in its code and its browser binding (RT2-4), an app's sign-in its request
    /// and its browser binding (RT3-2); any mixture is not ours.
    private static func purpose(_ fields: [String: JSONValue]) -> Purpose? {
        func text(_ field: Field) -> String?? {
            guard let value = fields[field.rawValue] else { return .some(nil) }
            return value.stringValue.map { .some($0) } ?? nil
        }
        guard let linkUser = text(.linkUser), let linkSession = text(.linkSession),
            let userCode = text(.deviceUserCode),
            let binding = text(.deviceBinding), let request = text(.appRequest)
        else { return nil }
        switch (linkUser, linkSession, userCode, binding, request) {
        case (nil, nil, nil, nil, nil): return .loopback
        case (let user?, let session?, nil, nil, nil): return UserID(user).map { .link(user: $0, session: session) }
        case (nil, nil, let code?, let binding?, nil): return .device(userCode: code, binding: binding)
        case (nil, nil, nil, let binding?, let request?): return .app(request: request, binding: binding)
        default: return nil
        }
    }
}

/// Permission to attach a provider account to a signed-in user (`broker link`): issued at `POST /auth/link`
/// to the bearer of a live session and handed to `/auth/{provider}/start` in place of the session's token
/// (which never goes into a browser's address bar).
///
/// Sealed under the flow key for one provider, bound to the CLI's PKCE challenge (only the process that asked
/// for it can redeem the code its sign-in ends in, and the identity is attached only then), and short-lived.
///
/// Bound to the session that asked (RT2-1): when that session ends (logout, revocation, a password change or
/// reset), the ticket, the sign-in it started and the code it ends in are all refused.
struct LinkTicket: Sendable, Hashable {
    var user: UserID
    /// The session that asked for the link.
    var session: String
    var codeChallenge: String
    var expiresAt: Int64

    /// A ticket is good for this many seconds (a person signing in at the provider).
    static let lifetime: Int64 = 600

    private static func associatedData(_ provider: ProviderID) -> [UInt8] { Array("link:\(provider.rawValue)".utf8) }

    func seal(key: [UInt8], provider: ProviderID) throws -> String {
        try SealedDocument.seal(
            [
                "u": .string(user.description), "s": .string(session), "c": .string(codeChallenge),
                "e": .int(expiresAt),
            ], key: key, purpose: Self.associatedData(provider))
    }

    /// Opens a ticket sealed for `provider`; `nil` when it is malformed, tampered with or for another provider.
    static func open(_ sealed: String, key: [UInt8], provider: ProviderID) -> LinkTicket? {
        guard
            let fields = SealedDocument.open(
                sealed, key: key, purpose: associatedData(provider), maxLength: SealedSignIn.maxSealedLength),
            let user = fields["u"]?.stringValue.flatMap(UserID.init),
            let session = fields["s"]?.stringValue, !session.isEmpty,
            let challenge = fields["c"]?.stringValue,
            let expiresAt = fields["e"]?.intValue
        else { return nil }
        return LinkTicket(user: user, session: session, codeChallenge: challenge, expiresAt: expiresAt)
    }
}
