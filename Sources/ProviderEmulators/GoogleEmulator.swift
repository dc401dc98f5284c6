public import BrokerCore
import BrokerCrypto
import Synchronization

/// Google's OpenID Connect endpoints, emulated faithfully enough that the broker's Google module runs
/// unchanged against them — and strictly enough to refuse what Google refuses: an unknown client, a
/// `redirect_uri` or PKCE verifier that does not match the authorization request, a code used twice or
/// too late, a wrong client secret, two client authentication methods at once.
///
/// Paths under `/google`: discovery, `jwks`, `authorize` (a consent page; its form posts back),
/// `token`, `userinfo`. Accounts: ``accounts``.
public final class GoogleEmulator: Sendable {
    public struct Account: Sendable {
        public let id: String
        public let subject: String
        public let email: String
        public let emailVerified: Bool
        public let name: String
    }

    /// The emulator's test accounts (Google subjects are 21-digit numbers).
    public static let accounts: [Account] = [
        Account(
            id: "alice", subject: "104512345678901234567", email: "alice@example.com", emailVerified: true,
            name: "Alice Example"),
        Account(
            id: "bob", subject: "109876543210987654321", email: "bob@example.net", emailVerified: false,
            name: "Bob Unverified"),
    ]

    /// The one registered client (Config/emulated.json uses it).
    public static let clientID = "emulated-google-client.apps.googleusercontent.com"
    public static let clientSecret = "emulated-google-secret"

    struct Grant {
        let clientID: String
        let redirectURI: String
        let nonce: String?
        let challenge: String?
        let scope: String
        let account: Account
        let expiresAt: Int64
    }

    private let grants = Mutex<[String: Grant]>([:])
    private let accessTokens = Mutex<[String: Account]>([:])
    let signer: JWTSigner
    let clock: @Sendable () -> Int64

    public init(clock: @escaping @Sendable () -> Int64) throws {
        signer = try JWTSigner(key: try AsymmetricKey.generate(.rsa(bits: 2048)))
        self.clock = clock
    }

    public func discovery(base: String) -> JSONValue {
        .object([
            "issuer": .string(base),
            "authorization_endpoint": .string(base + "/authorize"),
            "token_endpoint": .string(base + "/token"),
            "userinfo_endpoint": .string(base + "/userinfo"),
            "jwks_uri": .string(base + "/jwks"),
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["plain", "S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
        ])
    }

    public func jwks() throws -> JSONValue {
        var jwk = try signer.key.jwk()
        jwk.kid = signer.kid
        let members: [String: JSONValue?] = [
            "kty": .string(jwk.kty), "n": jwk.n.map(JSONValue.string), "e": jwk.e.map(JSONValue.string),
            "kid": .string(signer.kid), "alg": "RS256", "use": "sig",
        ]
        return .object(["keys": .array([.object(members.compactMapValues { $0 })])])
    }

    /// An answer: a status with a body, or a redirect.
    public enum Reply: Sendable {
        case page(status: Int, html: String)
        case json(status: Int, JSONValue)
        case redirect(String)
    }

    /// `GET /google/authorize`: checks the request as Google does, then shows the consent page.
    public func authorize(_ query: [String: String]) -> Reply {
        guard query["client_id"] == Self.clientID else {
            return .page(status: 401, html: Self.page("Error 401: invalid_client", "The OAuth client was not found."))
        }
        guard let redirect = query["redirect_uri"], redirect.hasPrefix("http://") || redirect.hasPrefix("https://")
        else {
            return .page(
                status: 400, html: Self.page("Error 400: redirect_uri_mismatch", "Missing or invalid redirect_uri."))
        }
        func fail(_ error: String, _ description: String) -> Reply {
            var fields = [("error", error), ("error_description", description)]
            if let state = query["state"] { fields.append(("state", state)) }
            return .redirect(redirect + "?" + FormEncoding.encode(fields))
        }
        guard query["response_type"] == "code" else {
            return fail("unsupported_response_type", "response_type must be code")
        }
        guard let scope = query["scope"], scope.split(separator: " ").contains("openid") else {
            return fail("invalid_scope", "Some requested scopes were invalid: openid is required")
        }
        if let challenge = query["code_challenge"] {
            guard query["code_challenge_method"] == "S256" || query["code_challenge_method"] == "plain",
                (43...128).contains(challenge.utf8.count)
            else { return fail("invalid_request", "Invalid code_challenge_method or code_challenge") }
        }
        let hidden = query.sorted { $0.key < $1.key }.map {
            "<input type=\"hidden\" name=\"\(Self.escape($0.key))\" value=\"\(Self.escape($0.value))\">"
        }.joined(separator: "\n")
        let choices = Self.accounts.enumerated().map { index, account in
            "<label><input type=\"radio\" name=\"account\" value=\"\(account.id)\"\(index == 0 ? " checked" : "")> "
                + "\(Self.escape(account.name)) &lt;\(Self.escape(account.email))&gt;</label><br>"
        }.joined(separator: "\n")
        return .page(
            status: 200,
            html: Self.page(
                "Sign in with Google (emulated)",
                """
                <form method="post" action="authorize">
                \(hidden)
                \(choices)
                <button name="decision" value="allow" id="allow">Continue</button>
                <button name="decision" value="deny" id="deny">Cancel</button>
                </form>
                """))
    }

    /// `POST /google/authorize`: the consent form's answer.
    public func consent(_ form: [String: String]) throws -> Reply {
        guard case .page(200, _) = authorize(form), let redirect = form["redirect_uri"] else { return authorize(form) }
        var fields: [(String, String)] = []
        if form["decision"] == "allow", let account = Self.accounts.first(where: { $0.id == form["account"] }) {
            let code = "4/0A" + (try SecureRandom.token(byteCount: 24))
            grants.withLock {
                $0[code] = Grant(
                    clientID: Self.clientID, redirectURI: redirect, nonce: form["nonce"],
                    challenge: form["code_challenge"], scope: form["scope"] ?? "openid", account: account,
                    expiresAt: clock() + 300)
            }
            fields = [("code", code), ("scope", form["scope"] ?? "openid")]
        } else {
            fields = [("error", "access_denied")]
        }
        if let state = form["state"] { fields.insert(("state", state), at: 0) }
        return .redirect(redirect + "?" + FormEncoding.encode(fields))
    }

    /// `POST /google/token`.
    public func token(_ form: [String: String], authorization: String?, issuer: String) throws -> Reply {
        func error(_ status: Int, _ code: String, _ description: String) -> Reply {
            .json(status: status, .object(["error": .string(code), "error_description": .string(description)]))
        }
        var clientID = form["client_id"]
        var secret = form["client_secret"]
        if let authorization, authorization.lowercased().hasPrefix("basic ") {
            if secret != nil { return error(400, "invalid_request", "Multiple client authentication methods") }
            guard let decoded = Base64URL.decodeStandard(String(authorization.dropFirst(6))),
                let text = String(validating: decoded, as: UTF8.self), let colon = text.firstIndex(of: ":")
            else { return error(401, "invalid_client", "Unauthorized") }
            clientID = FormEncoding.percentDecode(text[..<colon])
            secret = FormEncoding.percentDecode(text[text.index(after: colon)...])
        }
        guard clientID == Self.clientID, let secret, ConstantTime.equals(secret, Self.clientSecret) else {
            return error(401, "invalid_client", "Unauthorized")
        }
        guard form["grant_type"] == "authorization_code" else {
            return error(400, "unsupported_grant_type", "Invalid grant_type: \(form["grant_type"] ?? "")")
        }
        guard let code = form["code"], let grant = grants.withLock({ $0.removeValue(forKey: code) }) else {
            return error(400, "invalid_grant", "Malformed auth code.")
        }
        guard clock() <= grant.expiresAt else { return error(400, "invalid_grant", "Bad Request") }
        guard form["redirect_uri"] == grant.redirectURI else {
            return error(400, "redirect_uri_mismatch", "Bad Request")
        }
        if let challenge = grant.challenge {
            guard let verifier = form["code_verifier"], PKCE.verify(verifier: verifier, challenge: challenge) else {
                return error(400, "invalid_grant", "Invalid code verifier.")
            }
        }
        let now = clock()
        var claims: [String: JSONValue] = [
            "iss": .string(issuer), "azp": .string(Self.clientID), "aud": .string(Self.clientID),
            "sub": .string(grant.account.subject), "email": .string(grant.account.email),
            "email_verified": .bool(grant.account.emailVerified), "name": .string(grant.account.name),
            "iat": .int(now), "exp": .int(now + 3600),
        ]
        if let nonce = grant.nonce { claims["nonce"] = .string(nonce) }
        let accessToken = "ya29." + (try SecureRandom.token(byteCount: 32))
        accessTokens.withLock { $0[accessToken] = grant.account }
        return .json(
            status: 200,
            .object([
                "access_token": .string(accessToken), "expires_in": 3599, "token_type": "Bearer",
                "scope": .string(grant.scope), "id_token": .string(try signer.sign(claims: claims)),
            ]))
    }

    /// `GET /google/userinfo` with the access token.
    public func userinfo(authorization: String?) -> Reply {
        guard let authorization, authorization.hasPrefix("Bearer "),
            let account = accessTokens.withLock({ $0[String(authorization.dropFirst(7))] })
        else {
            return .json(
                status: 401, .object(["error": "invalid_request", "error_description": "Invalid Credentials"]))
        }
        return .json(
            status: 200,
            .object([
                "sub": .string(account.subject), "email": .string(account.email),
                "email_verified": .bool(account.emailVerified), "name": .string(account.name),
            ]))
    }

    static func escape(_ text: String) -> String {
        var out = ""
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(character)
            }
        }
        return out
    }

    static func page(_ title: String, _ body: String) -> String {
        """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><title>\(escape(title))</title></head>
        <body><h1>\(escape(title))</h1>
        \(body)
        </body></html>
        """
    }
}
