import BrokerCore
import BrokerCrypto

/// A WebAuthn ceremony the broker started: its challenge, what it is for, and until when — sealed under the
/// flow key into the page, so any broker of the store can finish it; the challenge is spent in the store's
/// state markers when it is finished, so it works once across brokers.
struct PasskeyCeremony: Sendable, Equatable {
    enum Purpose: Sendable, Equatable {
        /// A discoverable sign-in (any passkey of this relying party).
        case signIn
        /// Adding a passkey to `user`, for the CLI session `session` that asked (it must still be live).
        case register(user: UserID, session: String)
        /// Adding a passkey to `user`, whose only ways in are passkeys, through the mailed recovery link whose
        /// SHA-256 is `link` (spent when the passkey is registered, not when the page opens).
        case recover(user: UserID, link: [UInt8])
    }

    var purpose: Purpose
    var challenge: [UInt8]
    var expiresAt: Int64

    /// A person has five minutes for the browser's passkey prompt.
    static let lifetime: Int64 = 300

    private static let associatedData = Array("passkey-ceremony".utf8)

    static func start(_ purpose: Purpose, now: Int64) throws -> PasskeyCeremony {
        PasskeyCeremony(purpose: purpose, challenge: try SecureRandom.bytes(32), expiresAt: now + lifetime)
    }

    func seal(key: [UInt8]) throws -> String {
        var fields: [String: JSONValue] = ["c": .string(Base64URL.encode(challenge)), "e": .int(expiresAt)]
        switch purpose {
        case .signIn: break
        case .register(let user, let session):
            fields["u"] = .string(user.description)
            fields["s"] = .string(session)
        case .recover(let user, let link):
            fields["u"] = .string(user.description)
            fields["l"] = .string(Base64URL.encode(link))
        }
        return try SealedDocument.seal(fields, key: key, purpose: Self.associatedData)
    }

    /// `nil` when malformed, tampered with, sealed by another key, or past its lifetime at `now`.
    static func open(_ sealed: String, key: [UInt8], now: Int64) -> PasskeyCeremony? {
        guard let fields = SealedDocument.open(sealed, key: key, purpose: associatedData, maxLength: 1024),
            let challenge = fields["c"]?.stringValue.flatMap(Base64URL.decode), challenge.count == 32,
            let expiresAt = fields["e"]?.intValue, now <= expiresAt
        else { return nil }
        switch (fields["u"]?.stringValue, fields["s"]?.stringValue, fields["l"]?.stringValue) {
        case (nil, nil, nil):
            return PasskeyCeremony(purpose: .signIn, challenge: challenge, expiresAt: expiresAt)
        case (let user?, let session?, nil):
            guard let id = UserID(user), !session.isEmpty else { return nil }
            return PasskeyCeremony(
                purpose: .register(user: id, session: session), challenge: challenge, expiresAt: expiresAt)
        case (let user?, nil, let link?):
            guard let id = UserID(user), let hash = Base64URL.decode(link), hash.count == 32 else { return nil }
            return PasskeyCeremony(purpose: .recover(user: id, link: hash), challenge: challenge, expiresAt: expiresAt)
        default:
            return nil
        }
    }

    /// The store's marker that spends this ceremony's challenge.
    var marker: String { "passkey:" + Base64URL.encode(Digest.sha256(challenge)) }
}

/// Permission to open the page that adds a passkey (`broker passkey add`): issued at `POST /auth/passkey/ticket`
/// to the holder of an account token, bound to that CLI session, spent when the page opens, and short-lived —
/// the session's token never goes into a browser's address bar.
struct PasskeyTicket: Sendable, Equatable {
    var user: UserID
    var session: String
    var expiresAt: Int64

    static let lifetime: Int64 = 600
    private static let associatedData = Array("passkey-ticket".utf8)

    func seal(key: [UInt8]) throws -> String {
        try SealedDocument.seal(
            ["u": .string(user.description), "s": .string(session), "e": .int(expiresAt)], key: key,
            purpose: Self.associatedData)
    }

    static func open(_ sealed: String, key: [UInt8], now: Int64) -> PasskeyTicket? {
        guard let fields = SealedDocument.open(sealed, key: key, purpose: associatedData, maxLength: 1024),
            let user = fields["u"]?.stringValue.flatMap(UserID.init),
            let session = fields["s"]?.stringValue, !session.isEmpty,
            let expiresAt = fields["e"]?.intValue, now <= expiresAt
        else { return nil }
        return PasskeyTicket(user: user, session: session, expiresAt: expiresAt)
    }

    /// The store's marker that spends this ticket.
    static func marker(_ sealed: String) -> String { "passkey-ticket:" + Base64URL.encode(Digest.sha256(sealed)) }
}

/// A loopback sign-in of the CLI with a passkey (`broker login --provider passkey`): the CLI's redirect URI,
/// state and PKCE challenge, sealed into the page between `/auth/passkey/start` and `/auth/passkey/finish`.
struct PasskeyLoopback: Sendable, Equatable {
    var redirectURI: String
    var state: String
    var codeChallenge: String
    var expiresAt: Int64

    static let lifetime: Int64 = 600
    private static let associatedData = Array("passkey-loopback".utf8)

    func seal(key: [UInt8]) throws -> String {
        try SealedDocument.seal(
            ["r": .string(redirectURI), "t": .string(state), "c": .string(codeChallenge), "e": .int(expiresAt)],
            key: key, purpose: Self.associatedData)
    }

    static func open(_ sealed: String, key: [UInt8], now: Int64) -> PasskeyLoopback? {
        guard let fields = SealedDocument.open(sealed, key: key, purpose: associatedData, maxLength: 4096),
            let redirectURI = fields["r"]?.stringValue, let state = fields["t"]?.stringValue,
            let challenge = fields["c"]?.stringValue, let expiresAt = fields["e"]?.intValue, now <= expiresAt
        else { return nil }
        return PasskeyLoopback(redirectURI: redirectURI, state: state, codeChallenge: challenge, expiresAt: expiresAt)
    }
}
