package import BrokerCore

/// The `claims` request parameter (OpenID Connect Core 5.5): the claims an app asks for in the id token and at
/// userinfo, each by name — beyond what its scopes give, or instead of asking for a whole scope — and which of
/// them it holds essential or wants with a particular value (`acr`, `sub`).
///
/// Claims broker never issues are dropped when parsed (Core 5.5: an OP ignores what it does not understand);
/// a standard claim broker has no value for is answered with nothing, as a scope's would be.
package struct ClaimsRequest: Sendable, Hashable {
    package struct Claim: Sendable, Hashable {
        package var essential = false
        /// `value` or `values`: what the app will take (strings only; broker's claims of this kind are strings).
        package var values: [String]?

        package init(essential: Bool = false, values: [String]? = nil) {
            self.essential = essential
            self.values = values
        }
    }

    package var idToken: [String: Claim] = [:]
    package var userinfo: [String: Claim] = [:]

    package init(idToken: [String: Claim] = [:], userinfo: [String: Claim] = [:]) {
        self.idToken = idToken
        self.userinfo = userinfo
    }

    package var isEmpty: Bool { idToken.isEmpty && userinfo.isEmpty }

    /// The longest `claims` parameter taken (it rides in the sign-in pages' sealed request).
    package static let maxLength = 2048

    /// The scope each claim broker can release belongs to (Core 5.4): a claim named in a request is shown on the
    /// consent page, and remembered, as that scope.
    package static let scopeOfClaim: [String: String] = {
        var map: [String: String] = [:]
        for name in [
            "name", "family_name", "given_name", "middle_name", "nickname", "preferred_username", "profile",
            "picture", "website", "gender", "birthdate", "zoneinfo", "locale", "updated_at",
        ] { map[name] = "profile" }
        map["email"] = "email"
        map["email_verified"] = "email"
        map["address"] = "address"
        map["phone_number"] = "phone"
        map["phone_number_verified"] = "phone"
        return map
    }()

    /// The claims a request may name: the standard ones (Core 5.1), and those of the id token that say how
    /// the user signed in (Core 2).
    package static let known: Set<String> = Set(scopeOfClaim.keys).union(["sub", "acr", "amr", "auth_time"])

    /// Why a `claims` parameter is refused (`invalid_request`).
    package struct Malformed: Error, Equatable, CustomStringConvertible {
        package let description: String
    }

    /// The request in `text`: a JSON object whose `id_token` and `userinfo` members (others are ignored) map
    /// claim names to `null` or to `{essential, value, values}`.
    package static func parse(_ text: String) throws(Malformed) -> ClaimsRequest {
        guard text.utf8.count <= maxLength else {
            throw Malformed(description: "claims is longer than \(maxLength) bytes")
        }
        guard let document = JSONValue.parse(text.utf8), case .object(let members) = document else {
            throw Malformed(description: "claims must be a JSON object (OpenID Connect Core 5.5)")
        }
        var request = ClaimsRequest()
        for (member, keyPath) in [("id_token", \ClaimsRequest.idToken), ("userinfo", \ClaimsRequest.userinfo)] {
            guard let value = members[member] else { continue }
            guard case .object(let claims) = value else {
                throw Malformed(description: "claims.\(member) must be a JSON object")
            }
            for (name, entry) in claims {
                let claim = try Self.claim(entry, named: name, in: member)
                if known.contains(name) { request[keyPath: keyPath][name] = claim }
            }
        }
        return request
    }

    private static func claim(_ entry: JSONValue, named name: String, in member: String) throws(Malformed) -> Claim {
        let place = "claims.\(member).\(name.prefix(64))"
        switch entry {
        case .null: return Claim()
        case .object(let fields):
            var claim = Claim()
            switch fields["essential"] {
            case nil, .some(.null): break
            case .some(.bool(let essential)): claim.essential = essential
            default: throw Malformed(description: "\(place).essential must be true or false")
            }
            if let value = fields["value"], value != .null {
                claim.values = [try text(value, place: place + ".value")]
            }
            if let values = fields["values"], values != .null {
                guard let array = values.arrayValue, !array.isEmpty, array.count <= 16 else {
                    throw Malformed(description: "\(place).values must be an array of 1 to 16 values")
                }
                var texts: [String] = []
                for item in array { texts.append(try text(item, place: place + ".values")) }
                claim.values = (claim.values ?? []) + texts
            }
            return claim
        default:
            throw Malformed(description: "\(place) must be null or an object")
        }
    }

    /// A requested value as text: a string, or a number or boolean written as JSON writes it.
    private static func text(_ value: JSONValue, place: String) throws(Malformed) -> String {
        switch value {
        case .string(let string) where string.utf8.count <= 256: return string
        case .int(let number): return String(number)
        case .bool(let flag): return flag ? "true" : "false"
        default: throw Malformed(description: "\(place) must be a string of at most 256 bytes, a number or a boolean")
        }
    }

    /// The scopes the named claims belong to, in a stable order (for consent).
    package var impliedScopes: [String] {
        let names = Set(idToken.keys).union(userinfo.keys)
        return Set(names.compactMap { Self.scopeOfClaim[$0] }).sorted()
    }

    /// The request as the JSON Core 5.5 writes it (`values` always an array): what is sealed and stored.
    package var json: JSONValue {
        func member(_ claims: [String: Claim]) -> JSONValue {
            .object(
                claims.mapValues { claim in
                    var fields: [String: JSONValue] = [:]
                    if claim.essential { fields["essential"] = true }
                    if let values = claim.values { fields["values"] = .array(values.map(JSONValue.string)) }
                    return fields.isEmpty ? .null : .object(fields)
                })
        }
        var members: [String: JSONValue] = [:]
        if !idToken.isEmpty { members["id_token"] = member(idToken) }
        if !userinfo.isEmpty { members["userinfo"] = member(userinfo) }
        return .object(members)
    }

    /// ``json`` as text.
    package var serialized: String { json.serialized() }
}
