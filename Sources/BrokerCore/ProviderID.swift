/// A sign-in provider's id, as in the contract (`google`, `microsoftaccount`, …): lowercase letters, digits,
/// `-` and `_`, at most 32 characters.
///
/// An open set: provider modules (Providers/) declare their ids in their descriptors, and the executable's
/// list of descriptors decides which exist. Only ``custom`` — the broker's own email + password accounts — is
/// named here.
package struct ProviderID: RawRepresentable, Sendable, Hashable, Codable, Comparable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    package let rawValue: String

    /// `nil` unless `rawValue` is a well-formed id.
    package init?(rawValue: String) {
        guard Self.isWellFormed(rawValue) else { return nil }
        self.rawValue = rawValue
    }

    /// For ids written in code; a malformed literal is a programming error.
    package init(stringLiteral value: String) {
        precondition(Self.isWellFormed(value), "malformed provider id \(value)")
        rawValue = value
    }

    package static func isWellFormed(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 32
            && text.utf8.allSatisfy {
                $0.isASCIILowercase || $0.isASCIIDigit || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_")
            }
    }

    /// The broker's own email + password accounts.
    package static let custom: ProviderID = "custom"
    /// A WebAuthn passkey: a way in of its own (`signed_in_with`, `idp`), never a user id's provider.
    package static let passkey: ProviderID = "passkey"
    /// A password with a second factor's code (a TOTP code, or a recovery code): how a session that signed in
    /// with both is recorded (`signed_in_with`). Its `idp` is still ``custom``: the account is the same.
    package static let customOTP: ProviderID = "custom-otp"

    /// What `signed_in_with` holds for a sign-in through `self`: a password's are `custom` and `custom-otp`; any
    /// other way, itself — twice, so that every query can say `signed_in_with IN (?, ?)`.
    package var recordedWays: (String, String) {
        self == .custom ? (Self.custom.rawValue, Self.customOTP.rawValue) : (rawValue, rawValue)
    }

    /// The way in that issued the account: ``custom`` for a password with or without a second factor.
    package var identityProvider: ProviderID { self == .customOTP ? .custom : self }

    package var description: String { rawValue }

    package static func < (lhs: ProviderID, rhs: ProviderID) -> Bool { lhs.rawValue < rhs.rawValue }

    package init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let id = ProviderID(rawValue: text) else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "not a provider id"))
        }
        self = id
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// A stable user id: `<provider id>:<subject>`.
///
/// The subject is the provider's stable account id (OIDC `sub`, Facebook/Twitter numeric `id`, a lowercase
/// UUID for custom accounts), never an email address: the same provider account always maps to the same id.
package struct UserID: Sendable, Hashable, Codable, CustomStringConvertible {
    package let provider: ProviderID
    package let subject: String

    package init(provider: ProviderID, subject: String) {
        self.provider = provider
        self.subject = subject
    }

    /// Parses `provider:subject`; `nil` when the provider is unknown or the subject empty.
    /// The first `:` is found among the bytes (a provider id is ASCII without one): as `Character`s, a `:` with a
    /// combining mark after it is no colon, and a user id whose subject starts with a mark did not read back.
    package init?(_ text: String) {
        let utf8 = text.utf8
        guard let colon = utf8.firstIndex(of: UInt8(ascii: ":")),
            let provider = ProviderID(rawValue: String(text[..<colon]))
        else { return nil }
        let subject = String(text[utf8.index(after: colon)...])
        guard !subject.isEmpty else { return nil }
        self.init(provider: provider, subject: subject)
    }

    package var description: String { "\(provider.rawValue):\(subject)" }

    package init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let parsed = UserID(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a user id"))
        }
        self = parsed
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
