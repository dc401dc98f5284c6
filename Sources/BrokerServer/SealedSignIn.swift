import BrokerCore
import BrokerCrypto

/// A browser sign-in in progress, as the broker seals it into its own `state` towards the provider: nothing is
/// stored until the provider has vouched for someone.
///
/// Sealed with AES-256-GCM under the broker's flow key, the provider id as associated data (a state from one
/// provider's start cannot complete another's). One encoder and one decoder, here.
struct SealedSignIn: Sendable, Hashable {
    /// The CLI's own `state`, handed back to its loopback listener.
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
    var marker: String
    /// For `broker link`: the user the provider account is to be attached to (from a ``LinkTicket``); `nil`
    /// for a sign-in.
    var linkUser: UserID? = nil
    /// For `broker link`: the session that asked for the link; the link is refused once it has ended.
    var linkSession: String? = nil
    /// For the device flow: the user code of the authorization this sign-in is for; `nil` for the loopback flow
    /// (the broker then answers with its own confirmation page instead of a redirect to the CLI).
    var deviceUserCode: String? = nil
    /// For the device flow: the digest of the cookie set in the browser that typed the code (RT2-4); the
    /// callback completes only in that browser, so a provider URL handed to someone else lands nowhere.
    var deviceBinding: String? = nil
    /// For an app's sign-in (`/auth/authorize`): the sealed ``AuthorizationRequest`` the callback goes on
    /// with; `nil` otherwise.
    var appRequest: String? = nil

    /// Longest sealed state accepted back (a bound on work before any check).
    static let maxSealedLength = 12_288

    private enum Field: String {
        case cliState = "s", codeChallenge = "c", redirectURI = "r", nonce = "n", providerVerifier = "v"
        case expiresAt = "e", marker = "m", linkUser = "l", deviceUserCode = "d", linkSession = "k"
        case deviceBinding = "b", appRequest = "a"
    }

    /// The sealed, base64url form.
    func seal(key: [UInt8], provider: ProviderID) throws -> String {
        var fields: [String: JSONValue] = [
            Field.cliState.rawValue: .string(cliState), Field.codeChallenge.rawValue: .string(codeChallenge),
            Field.redirectURI.rawValue: .string(redirectURI), Field.nonce.rawValue: .string(nonce),
            Field.providerVerifier.rawValue: .string(providerVerifier), Field.expiresAt.rawValue: .int(expiresAt),
            Field.marker.rawValue: .string(marker),
        ]
        if let linkUser { fields[Field.linkUser.rawValue] = .string(linkUser.description) }
        if let linkSession { fields[Field.linkSession.rawValue] = .string(linkSession) }
        if let deviceUserCode { fields[Field.deviceUserCode.rawValue] = .string(deviceUserCode) }
        if let deviceBinding { fields[Field.deviceBinding.rawValue] = .string(deviceBinding) }
        if let appRequest { fields[Field.appRequest.rawValue] = .string(appRequest) }
        return Base64URL.encode(
            try AESGCM.seal(
                JSONValue.object(fields).serializedBytes, key: key, associatedData: Array(provider.rawValue.utf8)))
    }

    /// Opens a sealed state; `nil` when it is malformed, tampered with, or sealed for another provider or key.
    static func open(_ sealed: String, key: [UInt8], provider: ProviderID) -> SealedSignIn? {
        guard sealed.utf8.count <= maxSealedLength, let box = Base64URL.decode(sealed),
            let opened = AESGCM.open(box, key: key, associatedData: Array(provider.rawValue.utf8)),
            let fields = JSONValue.parse(opened)?.objectValue,
            let cliState = fields[Field.cliState.rawValue]?.stringValue,
            let codeChallenge = fields[Field.codeChallenge.rawValue]?.stringValue,
            let redirectURI = fields[Field.redirectURI.rawValue]?.stringValue,
            let nonce = fields[Field.nonce.rawValue]?.stringValue,
            let providerVerifier = fields[Field.providerVerifier.rawValue]?.stringValue,
            let expiresAt = fields[Field.expiresAt.rawValue]?.intValue,
            let marker = fields[Field.marker.rawValue]?.stringValue
        else { return nil }
        var linkUser: UserID?
        if let text = fields[Field.linkUser.rawValue] {
            guard let id = text.stringValue.flatMap(UserID.init) else { return nil }
            linkUser = id
        }
        var linkSession: String?
        if let text = fields[Field.linkSession.rawValue] {
            guard let session = text.stringValue else { return nil }
            linkSession = session
        }
        // A link names the session that asked for it (RT2-1): a state with one and not the other is not ours.
        guard (linkUser == nil) == (linkSession == nil) else { return nil }
        var deviceUserCode: String?
        if let text = fields[Field.deviceUserCode.rawValue] {
            guard let code = text.stringValue else { return nil }
            deviceUserCode = code
        }
        var deviceBinding: String?
        if let text = fields[Field.deviceBinding.rawValue] {
            guard let digest = text.stringValue else { return nil }
            deviceBinding = digest
        }
        // A device sign-in is bound to the browser that typed the code (RT2-4): one without is not ours.
        guard (deviceUserCode == nil) == (deviceBinding == nil) else { return nil }
        var appRequest: String?
        if let text = fields[Field.appRequest.rawValue] {
            guard let sealed = text.stringValue else { return nil }
            appRequest = sealed
        }
        return SealedSignIn(
            cliState: cliState, codeChallenge: codeChallenge, redirectURI: redirectURI, nonce: nonce,
            providerVerifier: providerVerifier, expiresAt: expiresAt, marker: marker, linkUser: linkUser,
            linkSession: linkSession, deviceUserCode: deviceUserCode, deviceBinding: deviceBinding,
            appRequest: appRequest)
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
        let document: JSONValue = [
            "u": .string(user.description), "s": .string(session), "c": .string(codeChallenge),
            "e": .int(expiresAt),
        ]
        return Base64URL.encode(
            try AESGCM.seal(document.serializedBytes, key: key, associatedData: Self.associatedData(provider)))
    }

    /// Opens a ticket sealed for `provider`; `nil` when it is malformed, tampered with or for another provider.
    static func open(_ sealed: String, key: [UInt8], provider: ProviderID) -> LinkTicket? {
        guard sealed.utf8.count <= SealedSignIn.maxSealedLength, let box = Base64URL.decode(sealed),
            let opened = AESGCM.open(box, key: key, associatedData: associatedData(provider)),
            let fields = JSONValue.parse(opened)?.objectValue,
            let user = fields["u"]?.stringValue.flatMap(UserID.init),
            let session = fields["s"]?.stringValue, !session.isEmpty,
            let challenge = fields["c"]?.stringValue,
            let expiresAt = fields["e"]?.intValue
        else { return nil }
        return LinkTicket(user: user, session: session, codeChallenge: challenge, expiresAt: expiresAt)
    }
}
