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

    /// Longest sealed state accepted back (a bound on work before any check).
    static let maxSealedLength = 4096

    private enum Field: String {
        case cliState = "s", codeChallenge = "c", redirectURI = "r", nonce = "n", providerVerifier = "v"
        case expiresAt = "e", marker = "m"
    }

    /// The sealed, base64url form.
    func seal(key: [UInt8], provider: ProviderID) throws -> String {
        let document: JSONValue = .object([
            Field.cliState.rawValue: .string(cliState), Field.codeChallenge.rawValue: .string(codeChallenge),
            Field.redirectURI.rawValue: .string(redirectURI), Field.nonce.rawValue: .string(nonce),
            Field.providerVerifier.rawValue: .string(providerVerifier), Field.expiresAt.rawValue: .int(expiresAt),
            Field.marker.rawValue: .string(marker),
        ])
        return Base64URL.encode(
            try AESGCM.seal(document.serializedBytes, key: key, associatedData: Array(provider.rawValue.utf8)))
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
        return SealedSignIn(
            cliState: cliState, codeChallenge: codeChallenge, redirectURI: redirectURI, nonce: nonce,
            providerVerifier: providerVerifier, expiresAt: expiresAt, marker: marker)
    }
}
