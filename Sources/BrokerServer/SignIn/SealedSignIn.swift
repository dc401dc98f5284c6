package import BrokerCore
import BrokerCrypto

/// A browser sign-in in progress, as the broker seals it into its own `state` towards the provider: nothing is
/// stored until the provider has vouched for someone.
///
/// Sealed with AES-256-GCM under the broker's flow key, the provider id as associated data (a state from one
/// provider's start cannot complete another's). One encoder and one decoder, here.
package struct SealedSignIn: Sendable, Hashable {
    /// What the sign-in is for, and so which feature ends it (``SignInCallback``).
    package enum Purpose: Sendable, Hashable {
        /// The device flow: the authorization with `userCode`; `binding` is the digest of the cookie set in the
        /// browser that typed the code (RT2-4), so the callback completes only there. Ends in the broker's
        /// confirmation page (`Device/`).
        case device(userCode: String, binding: String)
        /// An authorization request (`/auth/authorize`, an app's or the CLI's, `OpenIDProvider/`; a `broker link`
        /// when it carries a link, `Link/`): the sealed ``AuthorizationRequest`` the callback goes on with.
        /// `binding` is the digest of the cookie set in the browser that chose the provider (RT3-2), so that an
        /// attacker's own callback URL, opened by someone else, cannot sign that browser in as the attacker;
        /// `nil` for the CLI's `/auth/{provider}/start`, which starts no browser session: its code goes to the
        /// CLI that holds the PKCE verifier and checks `state`, so a callback opened elsewhere helps nobody.
        case authorization(request: String, binding: String?)
    }

    /// The OIDC nonce the provider's ID token must carry.
    var nonce: String
    /// The PKCE verifier of the broker's own request to the provider.
    var providerVerifier: String
    /// Seconds since the epoch after which the sign-in is refused.
    var expiresAt: Int64
    /// The single-use marker, spent in the store when the sign-in completes.
    package var marker: String
    var purpose: Purpose

    package init(nonce: String, providerVerifier: String, expiresAt: Int64, marker: String, purpose: Purpose) {
        self.nonce = nonce
        self.providerVerifier = providerVerifier
        self.expiresAt = expiresAt
        self.marker = marker
        self.purpose = purpose
    }

    /// Longest sealed state accepted back (a bound on work before any check).
    static let maxSealedLength = 12_288

    private enum Field: String {
        case nonce = "n", providerVerifier = "v", expiresAt = "e", marker = "m", deviceUserCode = "d"
        case binding = "b", request = "a"
    }

    /// The sealed, base64url form.
    package func seal(key: [UInt8], provider: ProviderID) throws -> String {
        var fields: [String: JSONValue] = [
            Field.nonce.rawValue: .string(nonce), Field.providerVerifier.rawValue: .string(providerVerifier),
            Field.expiresAt.rawValue: .int(expiresAt), Field.marker.rawValue: .string(marker),
        ]
        switch purpose {
        case .device(let userCode, let binding):
            fields[Field.deviceUserCode.rawValue] = .string(userCode)
            fields[Field.binding.rawValue] = .string(binding)
        case .authorization(let request, let binding):
            fields[Field.request.rawValue] = .string(request)
            if let binding { fields[Field.binding.rawValue] = .string(binding) }
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
            let nonce = fields[Field.nonce.rawValue]?.stringValue,
            let providerVerifier = fields[Field.providerVerifier.rawValue]?.stringValue,
            let expiresAt = fields[Field.expiresAt.rawValue]?.intValue,
            let marker = fields[Field.marker.rawValue]?.stringValue,
            let purpose = Self.purpose(fields)
        else { return nil }
        return SealedSignIn(
            nonce: nonce, providerVerifier: providerVerifier, expiresAt: expiresAt, marker: marker, purpose: purpose)
    }

    /// The purpose the fields name: a device sign-in needs its code and its browser binding (RT2-4), an
    /// authorization its request; any mixture, or neither, is not ours.
    private static func purpose(_ fields: [String: JSONValue]) -> Purpose? {
        func text(_ field: Field) -> String?? {
            guard let value = fields[field.rawValue] else { return .some(nil) }
            return value.stringValue.map { .some($0) } ?? nil
        }
        guard let userCode = text(.deviceUserCode), let binding = text(.binding), let request = text(.request)
        else { return nil }
        switch (userCode, binding, request) {
        case (let code?, let binding?, nil): return .device(userCode: code, binding: binding)
        case (nil, let binding, let request?): return .authorization(request: request, binding: binding)
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
