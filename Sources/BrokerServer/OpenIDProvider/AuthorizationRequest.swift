import BrokerCore
import BrokerCrypto

/// An authorization request (OpenID Connect Core 3.1.2.1), an app's or the CLI's (``CLIClient``), once its
/// client and redirect URI are known to be good: what the sign-in and consent pages carry (sealed, in a hidden field) and a provider's round trip
/// carries in its state, so that nothing is stored before someone signs in.
struct AuthorizationRequest: Sendable, Hashable {
    var clientID: String
    var redirectURI: String
    var scopes: [String]
    var state: String?
    var nonce: String?
    var codeChallenge: String?
    var prompt: Set<String>
    var maxAge: Int64?
    var loginHint: String?
    /// The `sub` of an `id_token_hint` the broker issued: the user the app expects.
    var expectedSubject: String?
    /// When the sealed request stops being accepted (the pages' lifetime).
    var expiresAt: Int64
    /// For `broker link` (the CLI only, from a ``LinkTicket``): the provider account signed in with is attached
    /// to this user rather than signing in as anyone.
    var link: LinkTarget?
    /// The registered resource (RFC 8707) the request named: the `aud` of the access token its code gives.
    var resource: String?
    /// `response_mode=form_post` (OAuth 2.0 Form Post Response Mode): the answer — code or error — is posted
    /// to the redirect URI by a page that submits itself, instead of carried in its query.
    var formPost = false
    /// `acr_values` (Core 3.1.2.1), the app's preference among ``AuthenticationContext`` levels, most wanted
    /// first.
    var acrValues: [String] = []
    /// The `claims` parameter (Core 5.5), when the request had one.
    var claims: ClaimsRequest?

    /// The scopes consent is asked and remembered for: those requested, and those the claims named in a
    /// `claims` parameter belong to.
    var consentScopes: [String] {
        var all = scopes
        for scope in claims?.impliedScopes ?? [] where !all.contains(scope) { all.append(scope) }
        return all
    }

    /// The user a link attaches to, and the session that asked for it (RT2-1: the link dies with it).
    struct LinkTarget: Sendable, Hashable {
        var user: UserID
        var session: String
    }

    /// How long a person has for the sign-in and consent pages.
    static let lifetime: Int64 = 1800

    private static let associatedData = Array("authorize".utf8)

    func seal(key: [UInt8]) throws -> String {
        var fields: [String: JSONValue] = [
            "c": .string(clientID), "r": .string(redirectURI), "s": .array(scopes.map(JSONValue.string)),
            "p": .array(prompt.sorted().map(JSONValue.string)), "e": .int(expiresAt),
        ]
        if let state { fields["t"] = .string(state) }
        if let nonce { fields["n"] = .string(nonce) }
        if let codeChallenge { fields["x"] = .string(codeChallenge) }
        if let maxAge { fields["m"] = .int(maxAge) }
        if let loginHint { fields["l"] = .string(loginHint) }
        if let expectedSubject { fields["u"] = .string(expectedSubject) }
        if let resource { fields["rs"] = .string(resource) }
        if formPost { fields["fp"] = true }
        if !acrValues.isEmpty { fields["av"] = .array(acrValues.map(JSONValue.string)) }
        if let claims { fields["cl"] = claims.json }
        if let link {
            fields["k"] = .string(link.user.description)
            fields["ks"] = .string(link.session)
        }
        return try SealedDocument.seal(fields, key: key, purpose: Self.associatedData)
    }

    /// `nil` when `sealed` is malformed, tampered with, from another key, or past its lifetime at `now`.
    static func open(_ sealed: String, key: [UInt8], now: Int64) -> AuthorizationRequest? {
        guard let fields = SealedDocument.open(sealed, key: key, purpose: associatedData, maxLength: 8192),
            let clientID = fields["c"]?.stringValue, let redirectURI = fields["r"]?.stringValue,
            let scopes = fields["s"]?.arrayValue?.compactMap(\.stringValue),
            let prompt = fields["p"]?.arrayValue?.compactMap(\.stringValue),
            let expiresAt = fields["e"]?.intValue, now <= expiresAt
        else { return nil }
        var link: LinkTarget?
        switch (fields["k"]?.stringValue.flatMap(UserID.init), fields["ks"]?.stringValue) {
        case (nil, nil): link = nil
        case (let user?, let session?) where !session.isEmpty: link = LinkTarget(user: user, session: session)
        default: return nil
        }
        var request = AuthorizationRequest(
            clientID: clientID, redirectURI: redirectURI, scopes: scopes, state: fields["t"]?.stringValue,
            nonce: fields["n"]?.stringValue, codeChallenge: fields["x"]?.stringValue, prompt: Set(prompt),
            maxAge: fields["m"]?.intValue, loginHint: fields["l"]?.stringValue,
            expectedSubject: fields["u"]?.stringValue, expiresAt: expiresAt, link: link,
            resource: fields["rs"]?.stringValue)
        request.formPost = fields["fp"]?.boolValue ?? false
        request.acrValues = fields["av"]?.arrayValue?.compactMap(\.stringValue) ?? []
        if let claims = fields["cl"] {
            guard let parsed = try? ClaimsRequest.parse(claims.serialized()) else { return nil }
            request.claims = parsed
        }
        return request
    }

    /// The answer to the app: `parameters` with `state` and `iss` — posted by a page that submits itself with
    /// `response_mode=form_post`; else in the redirect URI's query, by a 302 or, after one of the broker's forms
    /// (`fromForm`, whose `form-action 'self'` a redirect would meet), a page that moves on by itself.
    func answer(_ parameters: [(String, String)], issuer: String, fromForm: Bool) -> APIResponse {
        if formPost {
            var all = parameters
            if let state { all.append(("state", state)) }
            all.append(("iss", issuer))
            return Page.formPost(to: redirectURI, all)
        }
        let location = response(parameters, issuer: issuer)
        return fromForm ? Page.response(status: 200, Page.appOnward(to: location)) : .redirect(location)
    }

    /// `redirect_uri` with `parameters`, `state` and `iss` (RFC 9207) added to its query.
    func response(_ parameters: [(String, String)], issuer: String) -> String {
        var all = parameters
        if let state { all.append(("state", state)) }
        all.append(("iss", issuer))
        let separator = redirectURI.contains("?") ? "&" : "?"
        return redirectURI + separator + FormEncoding.encode(all)
    }
}
