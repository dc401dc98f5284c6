package import BrokerCore

/// What a provider module tells the broker's configuration about itself: its id and name, how people sign in
/// with it, the configuration keys it accepts (with their production defaults, kept equal to
/// each provider folder's `production.json`) and the rules between them.
///
/// The schema is apart from the module (`Providers/<Name>/Schema`, a target of its own that needs no HTTP stack
/// or cryptography): the configuration loader checks a `providers.<id>` section against it without linking
/// libcurl or OpenSSL, and so does its fuzz harness. The module pairs it with its factory in a
/// `ProviderDescriptor` (ProviderSupport).
package struct ProviderSchema: Sendable {
    /// How a person signs in with the provider.
    package enum Flow: String, Sendable {
        /// A browser redirect to the provider and back (`/auth/{id}/start` and `/callback`).
        case browser
        /// Email and password at the broker.
        case password
    }

    /// The provider's id — or, for a ``typed`` schema, the type's name (`oidc`).
    package var id: ProviderID
    /// The name shown to people (`/auth/providers`, the CLI's choice); a section's `display_name`, where the
    /// schema accepts one, replaces it.
    package var displayName: String
    /// A kind of provider rather than one: any id in `providers` whose section says `"type": "<id>"` is one of
    /// it (`providers.corp` with `"type": "oidc"`), as many as the operator configures. A schema that is not
    /// typed is the provider whose id it has.
    package var typed: Bool
    package var flow: Flow
    /// Every key the provider's configuration section may hold; any other key is refused at start.
    package var keys: [ProviderConfigKey]
    /// Rules between keys (one key requires another); an answer names the key and what is wrong.
    package var check: @Sendable (ProviderSection) -> (key: String, problem: String)?

    package init(
        id: ProviderID,
        displayName: String,
        flow: Flow = .browser,
        typed: Bool = false,
        keys: [ProviderConfigKey],
        check: @escaping @Sendable (ProviderSection) -> (key: String, problem: String)? = { _ in nil }
    ) {
        self.id = id
        self.displayName = displayName
        self.flow = flow
        self.typed = typed
        self.keys = keys
        self.check = check
    }

    /// The key named `name`, if the provider accepts it. `type` is accepted by every schema: a typed one needs
    /// it, and a provider with an id of its own may repeat its id there.
    package func key(_ name: String) -> ProviderConfigKey? {
        if name == "type" { return ProviderConfigKey("type", .choice([id.rawValue])) }
        return keys.first { $0.name == name }
    }

    /// The name people see for the provider configured by `section`: its `display_name`, else — for a provider
    /// of a type, which the operator named — its id, else the schema's.
    package func displayName(for section: ProviderSection) -> String {
        guard key("display_name") != nil else { return displayName }
        return section.text("display_name") ?? (typed ? section.id.rawValue : displayName)
    }

    /// The production defaults of the keys that have one (what the provider folder's `production.json` holds).
    package var defaults: [String: String] {
        keys.reduce(into: [:]) { result, key in
            if let value = key.defaultValue { result[key.name] = value }
        }
    }
}

/// One key a provider's configuration section accepts.
package struct ProviderConfigKey: Sendable, Hashable {
    package enum Kind: Sendable, Hashable {
        /// Any non-empty text (ids, tenants).
        case text
        /// A credential: non-empty text, never logged.
        case secret
        /// A URL the module fetches or sends the browser to: `https`, or `http` on a loopback host.
        case endpoint
        /// One of a fixed set of words.
        case choice([String])
        /// `true` or `false`.
        case flag
        /// Text matching a rule; the string describes it ("v19.0-style version").
        case pattern(String, @Sendable (String) -> Bool)
        /// A list of non-empty strings (JSON: an array; the environment: words separated by commas or spaces),
        /// each matching the rule when one is given.
        case list(String?, (@Sendable (String) -> Bool)?)

        package static func == (lhs: Kind, rhs: Kind) -> Bool {
            switch (lhs, rhs) {
            case (.text, .text), (.secret, .secret), (.endpoint, .endpoint), (.flag, .flag): true
            case (.choice(let a), .choice(let b)): a == b
            case (.pattern(let a, _), .pattern(let b, _)): a == b
            case (.list(let a, _), .list(let b, _)): a == b
            default: false
            }
        }

        package func hash(into hasher: inout Hasher) {
            switch self {
            case .text: hasher.combine(0)
            case .secret: hasher.combine(1)
            case .endpoint: hasher.combine(2)
            case .choice(let words): hasher.combine(words)
            case .flag: hasher.combine(4)
            case .pattern(let rule, _): hasher.combine(rule)
            case .list(let rule, _):
                hasher.combine(5)
                hasher.combine(rule)
            }
        }
    }

    package var name: String
    package var kind: Kind
    /// The production value used when the section does not set the key.
    package var defaultValue: String?

    package init(_ name: String, _ kind: Kind, default defaultValue: String? = nil) {
        self.name = name
        self.kind = kind
        self.defaultValue = defaultValue
    }

    /// Why `value` is not acceptable for this key, or `nil`.
    package func problem(with value: JSONValue) -> String? {
        if case .flag = kind {
            guard case .bool = value else { return "must be true or false" }
            return nil
        }
        if case .list(let rule, let matches) = kind {
            guard let items = value.arrayValue, items.count <= 64 else {
                return "must be a list of at most 64 strings"
            }
            for item in items {
                guard let text = item.stringValue, !text.isEmpty, text.utf8.count <= 256 else {
                    return "must hold non-empty strings of at most 256 bytes"
                }
                if let rule, let matches, !matches(text) {
                    return "holds \"\(text.prefix(64))\", which is not \(rule)"
                }
            }
            return nil
        }
        guard case .string(let text) = value, !text.isEmpty else { return "must be a non-empty string" }
        switch kind {
        case .endpoint: return Endpoint.problem(text)
        case .choice(let words):
            guard words.contains(text) else { return "must be " + words.map { "\"\($0)\"" }.joined(separator: " or ") }
            return nil
        case .pattern(let rule, let matches):
            return matches(text) ? nil : "must be \(rule)"
        default: return nil
        }
    }
}

/// A provider's configuration section as the broker checked it, with typed reads.
package struct ProviderSection: Sendable {
    package let id: ProviderID
    package let values: [String: JSONValue]

    package init(id: ProviderID, values: [String: JSONValue]) {
        self.id = id
        self.values = values
    }

    /// The key's text, if set.
    package func text(_ key: String) -> String? {
        guard let value = values[key]?.stringValue, !value.isEmpty else { return nil }
        return value
    }

    /// The key's list, if set (an empty list when it is not).
    package func list(_ key: String) -> [String] {
        values[key]?.arrayValue?.compactMap(\.stringValue) ?? []
    }

    /// The key's flag (`fallback` when it is not set).
    package func flag(_ key: String, default fallback: Bool = false) -> Bool {
        values[key]?.boolValue ?? fallback
    }

    /// The rule of a secret given either in the section (`key`: the file, or the environment) or in a file of
    /// its own (`fileKey`): exactly one of them; `missing` when neither is set.
    package func oneOf(_ key: String, orFile fileKey: String, missing: (key: String, problem: String))
        -> (key: String, problem: String)?
    {
        switch (text(key), text(fileKey)) {
        case (nil, nil): missing
        case (.some, .some): (fileKey, "and \(key) are both set; keep one")
        default: nil
        }
    }

    /// Two keys that must both be set (an id and its secret), with the contract's message.
    package func credentials(_ idKey: String, _ secretKey: String, label: String? = nil) throws(ProviderError)
        -> (id: String, secret: Secret)
    {
        guard let id = text(idKey), let secret = text(secretKey) else {
            throw .invalidResponse("providers.\(label ?? id.rawValue) needs \(idKey) and \(secretKey)")
        }
        return (id, Secret(secret))
    }

    /// An endpoint: the section's override, else `fallback` (the production default); checked again here so
    /// that a module never holds a URL that breaks the endpoint rule.
    package func endpoint(_ key: String, default fallback: String) throws(ProviderError) -> EndpointURL {
        try EndpointURL(text(key) ?? fallback, name: "providers.\(id).\(key)")
    }

    /// An endpoint override, if the section sets one.
    package func endpointIfSet(_ key: String) throws(ProviderError) -> EndpointURL? {
        guard let value = text(key) else { return nil }
        return try EndpointURL(value, name: "providers.\(id).\(key)")
    }
}

/// A URL that passed the endpoint rule (``Endpoint/problem(_:)``): what provider modules hold instead of
/// strings looked up by name.
package struct EndpointURL: Sendable, Hashable, CustomStringConvertible {
    package let url: String

    /// - Throws: a configuration error naming `name` when `url` breaks the rule.
    package init(_ url: String, name: String) throws(ProviderError) {
        if let problem = Endpoint.problem(url) { throw .invalidResponse("\(name) \(problem)") }
        self.url = url
    }

    /// The URL with `fields` as its query (added to a query it already has).
    package func with(query fields: [(String, String)]) -> String {
        url + (url.contains("?") ? "&" : "?") + FormEncoding.encode(fields)
    }

    package var description: String { url }
}
