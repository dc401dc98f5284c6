package import BrokerCore
import BrokerCrypto
import Synchronization

/// An OpenID Connect provider's endpoints, emulated faithfully enough that the broker's provider module runs
/// unchanged against them — and strictly enough to refuse what the provider refuses: an unknown client, a
/// `redirect_uri` or PKCE verifier that does not match the authorization request, a code used twice or
/// too late, a wrong client secret, two client authentication methods at once.
///
/// Each provider's folder declares its flavour (`Providers/Google/Emulator`, `Providers/MicrosoftAccount/Emulator`):
/// client, accounts, endpoint paths, tenants. Endpoints: discovery, keys, `authorize` (a consent page whose
/// form posts back), `token`, `userinfo`. An account with a tenant gets the Microsoft identity platform v2's
/// claims (`tid`, `oid`, `ver`, no `email_verified`).
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
        /// More claims, in the ID token and at userinfo (`groups`).
        package var extra: [String: JSONValue] = [:]

        package init(
            id: String, subject: String, email: String, emailVerified: Bool, name: String, tenantID: String? = nil,
            objectID: String? = nil, extra: [String: JSONValue] = [:]
        ) {
            self.extra = extra
            self.id = id
            self.subject = subject
            self.email = email
            self.emailVerified = emailVerified
            self.name = name
            self.tenantID = tenantID
            self.objectID = objectID
        }
    }

    /// What one provider's emulator is (its folder under `Providers/` declares it): its client, its test
    /// accounts and the shapes that differ between providers.
    package struct Flavor: Sendable {
        /// The endpoints' paths under the discovery base (`/authorize`, `/token`, `/jwks` for Google).
        package struct Paths: Sendable {
            package let authorize: String
            package let token: String
            package let keys: String

            package init(authorize: String, token: String, keys: String) {
                self.authorize = authorize
                self.token = token
                self.keys = keys
            }
        }

        package let name: String
        package let clientID: String
        package let clientSecret: String
        package let accounts: [Account]
        package let paths: Paths
        /// Whether an account may sign in through a tenant path segment (Microsoft's `consumers`,
        /// `organizations`, a tenant id); a flavour without tenants is never asked.
        package let inTenant: @Sendable (Account, String) -> Bool
        /// The account for a typed test user that is not one of ``accounts``: made up from the name, stably
        /// (the same name, the same subject), in the tenant the request names.
        package let madeUp: @Sendable (_ name: String, _ tenant: String?) -> Account
        /// Whether the ID token carries the address and name; without them a client must ask userinfo (as many
        /// providers answer unless `claims` asks).
        package var profileInIDToken = true

        package init(
            name: String, clientID: String, clientSecret: String, accounts: [Account], paths: Paths,
            profileInIDToken: Bool = true,
            inTenant: @escaping @Sendable (Account, String) -> Bool = { _, _ in true },
            madeUp: @escaping @Sendable (_ name: String, _ tenant: String?) -> Account
        ) {
            self.profileInIDToken = profileInIDToken
            self.name = name
            self.clientID = clientID
            self.clientSecret = clientSecret
            self.accounts = accounts
            self.paths = paths
            self.inTenant = inTenant
            self.madeUp = madeUp
        }
    }

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
        /// `signature`, `expired`, `nonce`, `audience`, `issuer`, `resigned` (another key under the current
        /// kid) or `unknown-kid`.
        let fault: String?
    }

    private let grants = Mutex<[String: Grant]>([:])
    private let accessTokens = Mutex<[String: Account]>([:])
    /// The signing keys, the current one first; the one before it stays published for a while after a
    /// ``rotate()``, as providers keep a retired key until tokens signed with it have expired.
    private let signers: Mutex<[JWTSigner]>
    var signer: JWTSigner { signers.withLock { $0[0] } }
    let clock: any WallClock

    /// Approves every sign-in as this test user without showing the page (`broker emulate --approve-as`).
    let approveAs: String?

    package init(_ flavor: Flavor, approveAs: String? = nil, clock: any WallClock) throws {
        self.flavor = flavor
        self.approveAs = approveAs
        signers = Mutex([try JWTSigner(key: try AsymmetricKey.generate(.rsa(bits: 2048)))])
        self.clock = clock
        _ = try Self.stranger.get()
    }

    /// The key of the `resigned` fault: an RSA key nobody published, made once per process when the first
    /// emulator starts — not while a token request waits (an RSA key can take seconds on a loaded machine, and
    /// the broker's exchange gives up after its `http_timeout`).
    private static let stranger = Result { try AsymmetricKey.generate(.rsa(bits: 2048)) }

    /// A new signing key; the current one is kept published beside it, older ones are withdrawn. Answers the
    /// new key's `kid`.
    @discardableResult
    package func rotate() throws -> String {
        let next = try JWTSigner(key: try AsymmetricKey.generate(.rsa(bits: 2048)))
        signers.withLock { $0 = [next] + $0.prefix(1) }
        return next.kid
    }

    /// The discovery document: `base` is the flavour's endpoints' base (`…/google`, `…/microsoft/{tenant}`),
    /// `issuer` the issuer it names (Microsoft's templated one for `common`).
    package func discovery(base: String, issuer: String) -> JSONValue {
        .object([
            "issuer": .string(issuer),
            "authorization_endpoint": .string(base + flavor.paths.authorize),
            "token_endpoint": .string(base + flavor.paths.token),
            "userinfo_endpoint": .string(base + "/userinfo"),
            "jwks_uri": .string(base + flavor.paths.keys),
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["plain", "S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
        ])
    }

    package func jwks() throws -> JSONValue {
        let keys = try signers.withLock { $0 }.map { signer -> JSONValue in
            let jwk = try signer.key.jwk()
            let members: [String: JSONValue?] = [
                "kty": .string(jwk.kty), "n": jwk.n.map(JSONValue.string), "e": jwk.e.map(JSONValue.string),
                "kid": .string(signer.kid), "alg": "RS256", "use": "sig",
            ]
            return .object(members.compactMapValues { $0 })
        }
        return .object(["keys": .array(keys)])
    }

    /// An answer: a status with a body, or a redirect.
    package enum Reply: Error, Sendable {
        case page(status: Int, html: String)
        case json(status: Int, JSONValue)
        case redirect(String)
        /// `application/x-www-form-urlencoded` text (OAuth 1.0a token answers).
        case text(String)
    }

    /// The accounts a tenant segment may sign in (all without one).
    func accounts(tenant: String?) -> [Account] {
        guard let tenant else { return flavor.accounts }
        return flavor.accounts.filter { flavor.inTenant($0, tenant) }
    }

    /// `GET …/authorize`: checks the request as the provider does, then shows the consent page — or, with
    /// `approve_as=USER` in the query (or `--approve-as`), approves at once as that test user.
    package func authorize(_ query: [String: String], tenant: String? = nil) -> Reply {
        Self.approvingAtOnce(query, approveAs: approveAs, page: consentPage(query, tenant: tenant)) {
            try consent($0, tenant: tenant)
        }
    }

    /// Every emulator's authorize answer: its consent `page`, or — when the page would be shown and the query
    /// says `approve_as=USER` (or the emulator was started with `--approve-as USER`) — the page's form posted
    /// at once to `consent` as that test user (the page again if that fails).
    package static func approvingAtOnce(
        _ query: [String: String], approveAs: String?, page: Reply, consent: ([String: String]) throws -> Reply
    ) -> Reply {
        guard case .page(200, _) = page, let user = query["approve_as"] ?? approveAs else { return page }
        var form = query
        form["decision"] = "allow"
        form["typed_user"] = user
        return (try? consent(form)) ?? page
    }

    /// A typed test user: a known account by id, else the flavour's made-up one.
    func account(named name: String, tenant: String?) -> Account {
        accounts(tenant: tenant).first { $0.id == name } ?? flavor.madeUp(name, tenant)
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
            "sub": .string(grant.account.subject), "iat": .int(now), "exp": .int(now + 3600),
        ]
        if flavor.profileInIDToken {
            claims["email"] = .string(grant.account.email)
            claims["name"] = .string(grant.account.name)
        }
        claims.merge(grant.account.extra) { $1 }
        if let tid = grant.account.tenantID, let oid = grant.account.objectID {
            // Microsoft v2: tid, oid, nbf, ver; no email_verified, no azp.
            claims["tid"] = .string(tid)
            claims["oid"] = .string(oid)
            claims["nbf"] = .int(now)
            claims["ver"] = "2.0"
            claims["preferred_username"] = .string(grant.account.email)
        } else {
            claims["azp"] = .string(self.clientID)
            if flavor.profileInIDToken { claims["email_verified"] = .bool(grant.account.emailVerified) }
        }
        if let nonce = grant.nonce { claims["nonce"] = .string(nonce) }
        switch grant.fault {
        case "expired":
            claims["iat"] = .int(now - 7200)
            claims["exp"] = .int(now - 3600)
        case "nonce": claims["nonce"] = "not-the-nonce"
        case "audience": claims["aud"] = "someone-elses-client"
        case "issuer": claims["iss"] = "https://issuer.invalid"
        default: break
        }
        var idToken = try signer.sign(claims: claims)
        if grant.fault == "resigned" || grant.fault == "unknown-kid" {
            // Signed by a key the provider never published: under the current kid (a forgery), or a kid of its own.
            // (An unknown kid needs no RSA key: a P-256 one is made at once, however loaded the machine.)
            let stranger = try grant.fault == "resigned" ? Self.stranger.get() : AsymmetricKey.generate(.ecP256)
            let kid = grant.fault == "resigned" ? signer.kid : "never-published"
            idToken = try JWTSigner(key: stranger, kid: kid).sign(claims: claims)
        }
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
        var claims: [String: JSONValue] = [
            "sub": .string(account.subject), "email": .string(account.email),
            "email_verified": .bool(account.emailVerified), "name": .string(account.name),
        ]
        claims.merge(account.extra) { $1 }
        return .json(status: 200, .object(claims))
    }

    /// The sign-in page every emulator shows: the request's parameters carried in hidden fields, the test
    /// users to pick from, a field to type any other, and allow / deny buttons.
    package static func consentPage(
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

    package static func page(_ title: String, _ body: String) -> String {
        """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><title>\(HTML.escape(title))</title></head>
        <body><h1>\(HTML.escape(title))</h1>
        \(body)
        </body></html>
        """
    }
}
