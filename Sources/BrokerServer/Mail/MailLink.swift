import BrokerCore
import BrokerCrypto
import BrokerStore

/// The single-use links the broker mails (password reset, address verification): a 256-bit secret in the URL,
/// only its SHA-256 in the store.
enum MailLink {
    /// Records a new link of `purpose` for `user` (ending the user's older ones) and returns its URL.
    static func create(
        store: any Store, issuer: String, path: String, user: UserID, purpose: String, lifetime: Int64, now: Int64
    ) async throws -> String {
        let secret = try SecureRandom.token(byteCount: 32)
        try await store.createEmailLink(
            hash: Digest.sha256(secret), user: user, purpose: purpose, expiresAt: now + lifetime, now: now)
        return issuer + path + "?token=" + secret
    }

    /// The SHA-256 of a link's secret when it has the shape of one (43 base64url characters), else `nil`.
    static func hash(_ token: String) -> [UInt8]? {
        guard token.utf8.count == 43, let bytes = Base64URL.decode(token), bytes.count == 32 else { return nil }
        return Digest.sha256(token)
    }
}
