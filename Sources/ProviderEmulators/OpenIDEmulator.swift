package import BrokerCore
import BrokerCrypto
import Synchronization

/// An OpenID Connect provider's endpoints, emulated faithfully enough that the broker's provider module runs
/// unchanged against them — and strictly enough to refuse what the provider refuses: an unknown client, a
/// `redirect_uri` or PKCE verifier that does not match the authorization request, a code used twice or
/// too late, a wrong client secret, two client authentication methods at once.
///
/// Two flavours: Google (under `/google`) and the Microsoft identity platform v2 (under
/// `/microsoft/{tenant}/…`, with Microsoft's tenant-templated issuer and `tid`/`oid` claims). Endpoints:
/// discovery, keys, `authorize` (a consent page whose form posts back), `token`, `userinfo`.
package final class OpenIDEmulator: Sendable {
    package struct Account: Sendable {
        package let id: String
        package let subject: String
        package let email: String
        package let emailVerified: Bool
        package let name: String
        /// Microsoft: the account's tenant (`tid`) and object id (`oid`).
        package var tenantID: String? = nil
        package var objectID: String? = nil
    }

    package struct Flavor: Sendable {
        package let name: String
        package let clientID: String
        package let clientSecret: String
        package let accounts: [Account]
    }

    package static let google = Flavor(
        name: "Google",
        clientID: "emulated-google-client.apps.googleusercontent.com",
        clientSecret: "emulated-google-secret",
        accounts: [
            // Google subjects are 21-digit numbers.
            Account(
                id: "alice", subject: "104512345678901234567", email: "alice@example.com", emailVerified: true,
                name: "Alice Example"),
            Account(
                id: "bob", subject: "109876543210987654321", email: "bob@example.net", emailVerified: false,
                name: "Bob Unverified"),
        ])

    package static let consumersTenantID = "9188040d-6c67-4c5b-b112-36a304b66dad"

    package static let microsoft = Flavor(
        name: "Microsoft",
        clientID: "6731de76-14a6-49ae-97bc-6eba6914391e",
        clientSecret: "emulated-microsoft-secret",
        accounts: [
            Account(
                id: "carol", subject: "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ", email: "carol@outlook.com",
                emailVerified: true, name: "Carol Personal", tenantID: consumersTenantID,
                objectID: "00000000-0000-0000-6d1e-5e3f2a1b0c9d"),
            Account(
                id: "dave", subject: "Zf2Jq6lXoWmQ2nGm0zQ1hQ4w5y7uR9tPqLkJhGfDsAa", email: "dave@contoso.example",
                emailVerified: false, name: "Dave Work", tenantID: "72f988bf-86f1-41af-91ab-2d7cd011db47",
                objectID: "4f5e6d7c-8b9a-4c3d-9e2f-1a0b9c8d7e6f"),
        ])

    package let flavor: Flavor
    var clientID: String { flavor.clientID }

    struct Grant {
        let clientID: String
        let redirectURI: String
        let nonce: String?
        let challenge: String?
        let scope: String
        let account: Account
        let expiresAt: Int64
        /// A deliberate flaw in the ID token (`fault=` on the authorize request, for negative tests):
        /// `signature`, `expired`, `nonce` or `audience`.
        let fault: String?
    }

    private let grants = Mutex<[String: Grant]>([:])
    private let accessTokens = Mutex<[String: Account]>([:])
    let signer: JWTSigner
    let clock: any WallClock

    /// Approves every sign-in as this test user without showing the page (`broker emulate --approve-as`).
    let approveAs: String?

    package init(_ flavor: Flavor, approveAs: String? = nil, clock: any WallClock) throws {
        self.flavor = flavor
        self.approveAs = approveAs
        signer = try JWTSigner(key: try AsymmetricKey.generate(.rsa(bits: 2048)))
        self.clock = clock
    }

    /// Microsoft's issuer for a tenant segment: the consumer tenant's id for `consumers`, the literal
    /// `{tenantid}` template for `common` and `organizations`, the id itself otherwise.
    package static func microsoftIssuer(base: String, tenant: String) -> String {
        let tid: String
        switch tenant {
        case "consumers": tid = consumersTenantID
        case "common", "organizations": tid = "{tenantid}"
        default: tid = tenant
        }
        return "\(base)/\(tid)/v2.0"
    }

    /// Google: `base` is `…/google`. Microsoft: `base` is `…/microsoft/{tenant}`, `issuer` the templated one.
    package func discovery(base: String, issuer: String) -> JSONValue {
        let endpoints: (String, String, String) =
            flavor.name == "Google"
            ? (base + "/authorize", base + "/token", base + "/jwks")
            : (base + "/oauth2/v2.0/authorize", base + "/oauth2/v2.0/token", base + "/discovery/v2.0/keys")
        return .object([
            "issuer": .string(issuer),
            "authorization_endpoint": .string(endpoints.0),
            "token_endpoint": .string(endpoints.1),
            "userinfo_endpoint": .string(base + "/userinfo"),
            "jwks_uri": .string(endpoints.2),
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["plain", "S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
        ])
    }

    package func jwks() throws -> JSONValue {
        var jwk = try signer.key.jwk()
        jwk.kid = signer.kid
        let members: [String: JSONValue?] = [
            "kty": .string(jwk.kty), "n": jwk.n.map(JSONValue.string), "e": jwk.e.map(JSONValue.string),
            "kid": .string(signer.kid), "alg": "RS256", "use": "sig",
        ]
        return .object(["keys": .array([.object(members.compactMapValues { $0 })])])
    }

    /// An answer: a status with a body, or a redirect.
    package enum Reply: Error, Sendable {
        case page(status: Int, html: String)
        case json(status: Int, JSONValue)
        case redirect(String)
        /// `application/x-www-form-urlencoded` text (OAuth 1.0a token answers).
        case text(String)
    }

    /// The accounts a tenant segment may sign in (Microsoft: `consumers` only personal accounts,
    /// `organizations` only work accounts, a tenant id only its own).
    func accounts(tenant: String?) -> [Account] {
        guard let tenant else { return flavor.accounts }
        return flavor.accounts.filter { account in
            switch tenant {
            case "common": true
            case "consumers": account.tenantID == Self.consumersTenantID
            case "organizations": account.tenantID != Self.consumersTenantID
            default: account.tenantID == tenant
            }
        }
    }

    /// `GET …/authorize`: checks the request as the provider does, then shows the consent page — or, with
    /// `approve_as=USER` in the query (or `--approve-as`), approves at once as that test user.
    package func authorize(_ query: [String: String], tenant: String? = nil) -> Reply {
        let page = consentPage(query, tenant: tenant)
        guard case .page(200, _) = page, let user = query["approve_as"] ?? approveAs else { return page }
        var form = query
        form["decision"] = "allow"
        form["typed_user"] = user
        return (try? consent(form, tenant: tenant)) ?? page
    }

    /// A typed test user: a known account by id, else one made up from the name (stable: the same name,
    /// the same subject).
    func account(named name: String, tenant: String?) -> Account {
        if let known = accounts(tenant: tenant).first(where: { $0.id == name }) { return known }
        let digest = Digest.sha256(name)
        let digits = digest.map { String($0 % 10) }.joined()
        if flavor.name == "Google" {
            return Account(
                id: name, subject: "1" + digits.prefix(20), email: "\(name)@example.com", emailVerified: true,
                name: name)
        }
        let hex = digest.hexString
        let oid = [
            hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4), hex.dropFirst(16).prefix(4),
            hex.dropFirst(20).prefix(12),
        ]
        .joined(separator: "-")
        let tid: String
        switch tenant {
        case nil, "consumers", "common": tid = Self.consumersTenantID
        case "organizations": tid = "72f988bf-86f1-41af-91ab-2d7cd011db47"
        case let id?: tid = id
        }
        return Account(
            id: name, subject: Base64URL.encode(Array(digest.prefix(32))), email: "\(name)@outlook.com",
            emailVerified: true, name: name, tenantID: tid, objectID: oid)
    }

    func consentPage(_ query: [String: String], tenant: String? = nil) -> Reply {
        guard query["client_id"] == clientID else {
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
        return Self.consentPage(
            title: "Sign in with \(flavor.name) (emulated)", hidden: query,
            users: accounts(tenant: tenant).map { ($0.id, "\($0.name) <\($0.email)>") }, action: "authorize")
    }

    /// `POST …/authorize`: the consent form's answer.
    package func consent(_ form: [String: String], tenant: String? = nil) throws -> Reply {
        guard case .page(200, _) = consentPage(form, tenant: tenant), let redirect = form["redirect_uri"] else {
            return consentPage(form, tenant: tenant)
        }
        var fields: [(String, String)] = []
        let typed = form["typed_user"].flatMap { $0.isEmpty ? nil : $0 }
        if form["decision"] == "allow",
            let account = typed.map({ self.account(named: $0, tenant: tenant) })
                ?? accounts(tenant: tenant).first(where: { $0.id == form["account"] })
        {
            let code = "4/0A" + (try SecureRandom.token(byteCount: 24))
            grants.withLock {
                $0[code] = Grant(
                    clientID: clientID, redirectURI: redirect, nonce: form["nonce"],
                    challenge: form["code_challenge"], scope: form["scope"] ?? "openid", account: account,
                    expiresAt: clock.seconds() + 300, fault: form["fault"])
            }
            fields = [("code", code), ("scope", form["scope"] ?? "openid")]
        } else {
            fields = [("error", "access_denied")]
        }
        if let state = form["state"] { fields.insert(("state", state), at: 0) }
        return .redirect(redirect + "?" + FormEncoding.encode(fields))
    }

    /// `POST …/token`. `issuer(account)` is the `iss` of the account's ID token.
    package func token(_ form: [String: String], authorization: String?, issuer: (Account) -> String) throws -> Reply {
        func error(_ status: Int, _ code: String, _ description: String) -> Reply {
            .json(status: status, .object(["error": .string(code), "error_description": .string(description)]))
        }
        var clientID = form["client_id"]
        var secret = form["client_secret"]
        if let authorization, authorization.lowercased().hasPrefix("basic ") {
            if secret != nil { return error(400, "invalid_request", "Multiple client authentication methods") }
            guard let basic = HTTPBasic.credentials(fromToken: String(authorization.dropFirst(6))) else {
                return error(401, "invalid_client", "Unauthorized")
            }
            (clientID, secret) = (basic.id, basic.secret)
        }
        guard clientID == self.clientID, let secret, ConstantTime.equals(secret, flavor.clientSecret) else {
            return error(401, "invalid_client", "Unauthorized")
        }
        guard form["grant_type"] == "authorization_code" else {
            return error(400, "unsupported_grant_type", "Invalid grant_type: \(form["grant_type"] ?? "")")
        }
        guard let code = form["code"], let grant = grants.withLock({ $0.removeValue(forKey: code) }) else {
            return error(400, "invalid_grant", "Malformed auth code.")
        }
        guard clock.seconds() <= grant.expiresAt else { return error(400, "invalid_grant", "Bad Request") }
        guard form["redirect_uri"] == grant.redirectURI else {
            return error(400, "redirect_uri_mismatch", "Bad Request")
        }
        if let challenge = grant.challenge {
            guard let verifier = form["code_verifier"], PKCE.verify(verifier: verifier, challenge: challenge) else {
                return error(400, "invalid_grant", "Invalid code verifier.")
            }
        }
        let now = clock.seconds()
        var claims: [String: JSONValue] = [
            "iss": .string(issuer(grant.account)), "aud": .string(self.clientID),
            "sub": .string(grant.account.subject), "email": .string(grant.account.email),
            "name": .string(grant.account.name), "iat": .int(now), "exp": .int(now + 3600),
        ]
        if let tid = grant.account.tenantID, let oid = grant.account.objectID {
            // Microsoft v2: tid, oid, nbf, ver; no email_verified, no azp.
            claims["tid"] = .string(tid)
            claims["oid"] = .string(oid)
            claims["nbf"] = .int(now)
            claims["ver"] = "2.0"
            claims["preferred_username"] = .string(grant.account.email)
        } else {
            claims["azp"] = .string(self.clientID)
            claims["email_verified"] = .bool(grant.account.emailVerified)
        }
        if let nonce = grant.nonce { claims["nonce"] = .string(nonce) }
        switch grant.fault {
        case "expired":
            claims["iat"] = .int(now - 7200)
            claims["exp"] = .int(now - 3600)
        case "nonce": claims["nonce"] = "not-the-nonce"
        case "audience": claims["aud"] = "someone-elses-client"
        default: break
        }
        var idToken = try signer.sign(claims: claims)
        if grant.fault == "signature" {
            // A well-formed signature that does not verify: one character inside it changed (not the last,
            // whose unused bits must stay zero in strict base64url).
            var characters = Array(idToken)
            let index = characters.count - 10
            characters[index] = characters[index] == "A" ? "B" : "A"
            idToken = String(characters)
        }
        let accessToken = "ya29." + (try SecureRandom.token(byteCount: 32))
        accessTokens.withLock { $0[accessToken] = grant.account }
        return .json(
            status: 200,
            .object([
                "access_token": .string(accessToken), "expires_in": 3599, "token_type": "Bearer",
                "scope": .string(grant.scope), "id_token": .string(idToken),
            ]))
    }

    /// `GET …/userinfo` with the access token.
    package func userinfo(authorization: String?) -> Reply {
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

    /// The sign-in page every emulator shows: the request's parameters carried in hidden fields, the test
    /// users to pick from, a field to type any other, and allow / deny buttons.
    static func consentPage(
        title: String, hidden: [String: String], users: [(id: String, label: String)], action: String,
        allow: String = "Continue"
    ) -> Reply {
        let fields = hidden.sorted { $0.key < $1.key }.map {
            "<input type=\"hidden\" name=\"\(HTML.escape($0.key))\" value=\"\(HTML.escape($0.value))\">"
        }.joined(separator: "\n")
        let choices = users.enumerated().map { index, user in
            "<label><input type=\"radio\" name=\"account\" value=\"\(HTML.escape(user.id))\"\(index == 0 ? " checked" : "")> "
                + "\(HTML.escape(user.label))</label><br>"
        }.joined(separator: "\n")
        return .page(
            status: 200,
            html: page(
                title,
                """
                <form method="post" action="\(HTML.escape(action))">
                \(fields)
                \(choices)
                <label>or type a test user: <input type="text" name="typed_user" id="typed_user"></label><br>
                <button name="decision" value="allow" id="allow">\(HTML.escape(allow))</button>
                <button name="decision" value="deny" id="deny">Cancel</button>
                </form>
                """))
    }

    static func page(_ title: String, _ body: String) -> String {
        """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><title>\(HTML.escape(title))</title></head>
        <body><h1>\(HTML.escape(title))</h1>
        \(body)
        </body></html>
        """
    }
}
