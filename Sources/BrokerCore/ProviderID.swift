/// The identity providers the broker knows, by their contract ids.
public enum ProviderID: String, Sendable, Hashable, Codable, CaseIterable {
    case google
    case facebook
    case microsoftaccount
    case twitter
    case custom

    /// The name shown to people (`/auth/providers`).
    public var displayName: String {
        switch self {
        case .google: "Google"
        case .facebook: "Facebook"
        case .microsoftaccount: "Microsoft account"
        case .twitter: "Twitter / X"
        case .custom: "Email and password"
        }
    }
}

/// A stable user id: `<provider id>:<subject>`.
///
/// The subject is the provider's stable account id (OIDC `sub`, Facebook/Twitter numeric `id`, a lowercase
/// UUID for custom accounts), never an email address: the same provider account always maps to the same id.
public struct UserID: Sendable, Hashable, Codable, CustomStringConvertible {
    public let provider: ProviderID
    public let subject: String

    public init(provider: ProviderID, subject: String) {
        self.provider = provider
        self.subject = subject
    }

    /// Parses `provider:subject`; `nil` when the provider is unknown or the subject empty.
    public init?(_ text: String) {
        guard let colon = text.firstIndex(of: ":"),
            let provider = ProviderID(rawValue: String(text[..<colon]))
        else { return nil }
        let subject = String(text[text.index(after: colon)...])
        guard !subject.isEmpty else { return nil }
        self.init(provider: provider, subject: subject)
    }

    public var description: String { "\(provider.rawValue):\(subject)" }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let parsed = UserID(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a user id"))
        }
        self = parsed
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
