package import BrokerCore
import BrokerCrypto
import HTTPTypes
import Hummingbird
package import ProviderEmulators
import Synchronization

/// Sign in with Apple under `/apple`, for `broker emulate` (Config/emulated.json points `providers.apple` here,
/// with the test key Config/emulated-apple.p8): discovery, `auth/keys`, `auth/authorize` — which insists on
/// `response_mode=form_post` when the scope asks for a name or an address, as Apple does, and answers with a
/// page that posts `code`, `state` and, on an account's first sign-in only, `user` (the name) to the
/// callback — and `auth/token`, which checks the client secret JWT as Apple does (ES256 under the registered
/// key id, `iss` the team id, `sub` the Services ID, `aud` Apple, not expired, at most six months long).
package enum AppleEmulator {
    package static let clientID = "com.example.broker.signin"
    package static let teamID = "EMULTEAM01"
    package static let keyID = "EMULKEY001"
    /// The public half of Config/emulated-apple.p8: the key "registered" for ``keyID``.
    static let registeredKey = """
        -----BEGIN PUBLIC KEY-----
        MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEoimKPlo6gLx/ZyoJ+42uypWp7pNS
        eWtSSjwfXNNeY/vkJKNTqm8oWWkaClc8mD0CofpkYqBCZJk+OPyrghAJ6A==
        -----END PUBLIC KEY-----
        """

    struct Account: Sendable {
        let id: String
        let subject: String
        let email: String
        let privateRelay: Bool
        let firstName: String
        let lastName: String
    }

    static let accounts = [
        Account(
            id: "ada", subject: "001234.5f3c0b5e9a8d4c2e8f1a6b7c9d0e1f2a.1234", email: "ada@example.com",
            privateRelay: false, firstName: "Ada", lastName: "Lovelace"),
        Account(
            id: "relay", subject: "001234.0a1b2c3d4e5f60718293a4b5c6d7e8f9.0042",
            email: "x7k2m9q4p1@privaterelay.appleid.com", privateRelay: true, firstName: "Riley", lastName: "Relay"),
    ]

    static func account(named name: String) -> Account {
        accounts.first { $0.id == name }
            ?? Account(
                id: name, subject: "001234." + Array(Digest.sha256(name).prefix(16)).hexString + ".0001",
                email: "\(name)@example.com", privateRelay: false, firstName: name, lastName: "Example")
    }

    /// What an issued code is for.
    struct Grant {
        let redirectURI: String
        let nonce: String?
        let account: Account
        let expiresAt: Int64
    }

    package final class State: Sendable {
        let signer: JWTSigner
        let grants = Mutex<[String: Grant]>([:])
        /// The subjects that have signed in once: `user` is posted only the first time.
        let known = Mutex<Set<String>>([])
        package init() throws { signer = try JWTSigner(key: try AsymmetricKey.generate(.rsa(bits: 2048))) }
    }

    static func error(_ code: String) -> OpenIDEmulator.Reply {
        .json(status: 400, .object(["error": .string(code)]))
    }

    /// The authorize request as Apple checks it; `nil` when it may proceed.
    static func refusal(_ query: [String: String]) -> OpenIDEmulator.Reply? {
        guard query["client_id"] == clientID else {
            return .page(status: 400, html: OpenIDEmulator.page("Invalid client id or web redirect url.", ""))
        }
        guard let redirect = query["redirect_uri"], redirect.hasPrefix("http://") || redirect.hasPrefix("https://")
        else { return .page(status: 400, html: OpenIDEmulator.page("Invalid client id or web redirect url.", "")) }
        guard query["response_type"] == "code" else {
            return .page(status: 400, html: OpenIDEmulator.page("Invalid response_type.", ""))
        }
        let scopes = (query["scope"] ?? "").split(separator: " ")
        if (scopes.contains("name") || scopes.contains("email")) && query["response_mode"] != "form_post" {
            return .page(
                status: 400,
                html: OpenIDEmulator.page(
                    "Invalid request", "response_mode must be form_post when name or email scope is requested."))
        }
        return nil
    }

    /// The page Apple answers a decision with: a form that posts itself to the callback.
    static func formPost(to redirect: String, _ fields: [(String, String)]) -> OpenIDEmulator.Reply {
        let inputs = fields.map {
            "<input type=\"hidden\" name=\"\(HTML.escape($0.0))\" value=\"\(HTML.escape($0.1))\">"
        }.joined(separator: "\n")
        return .page(
            status: 200,
            html: """
                <!doctype html>
                <html lang="en"><head><meta charset="utf-8"><title>Sign in with Apple (emulated)</title></head>
                <body onload="document.forms[0].submit()">
                <form method="post" action="\(HTML.escape(redirect))" id="form_post">
                \(inputs)
                <noscript><button type="submit">Continue</button></noscript>
                </form>
                </body></html>
                """)
    }

    package static func consent(_ form: [String: String], state: State, clock: any WallClock) throws
        -> OpenIDEmulator.Reply
    {
        if let refusal = refusal(form) { return refusal }
        let redirect = form["redirect_uri"] ?? ""
        var fields: [(String, String)] = []
        if let value = form["state"] { fields.append(("state", value)) }
        let typed = form["typed_user"].flatMap { $0.isEmpty ? nil : $0 }
        guard form["decision"] == "allow", let name = typed ?? form["account"] else {
            return formPost(to: redirect, fields + [("error", "user_cancelled_authorize")])
        }
        let account = account(named: name)
        let code = "c" + (try SecureRandom.token(byteCount: 24)) + ".0.emul"
        state.grants.withLock {
            $0[code] = Grant(
                redirectURI: redirect, nonce: form["nonce"], account: account, expiresAt: clock.seconds() + 300)
        }
        fields.append(("code", code))
        let first = state.known.withLock { $0.insert(account.subject).inserted }
        if first, (form["scope"] ?? "").split(separator: " ").contains("name") {
            let user: JSONValue = .object([
                "name": .object(["firstName": .string(account.firstName), "lastName": .string(account.lastName)]),
                "email": .string(account.email),
            ])
            fields.append(("user", user.serialized()))
        }
        return formPost(to: redirect, fields)
    }

    /// Why the client secret is not one Apple accepts, or `nil`.
    static func clientSecretProblem(_ secret: String, now: Int64) -> String? {
        do {
            let key = try AsymmetricKey(pem: registeredKey)
            var options = JWTVerifier.Options(issuer: teamID, audience: "https://appleid.apple.com", leeway: 60)
            options.requiredClaims = ["iss", "sub", "iat", "exp"]
            var keys = JWTKeySet()
            try keys.add(key, kid: keyID)
            let verified = try JWTVerifier(keys: keys, options: options).verify(secret, now: now)
            guard verified.claims["sub"]?.stringValue == clientID else { return "sub is not the client id" }
            guard case .int(let iat)? = verified.claims["iat"], case .int(let exp)? = verified.claims["exp"],
                exp - iat <= 15_777_000
            else { return "lives longer than six months" }
            return nil
        } catch {
            return "\(error)"
        }
    }

    package static func token(_ form: [String: String], state: State, issuer: String, clock: any WallClock) throws
        -> OpenIDEmulator.Reply
    {
        guard form["client_id"] == clientID, let secret = form["client_secret"],
            clientSecretProblem(secret, now: clock.seconds()) == nil
        else { return error("invalid_client") }
        guard form["grant_type"] == "authorization_code" else { return error("unsupported_grant_type") }
        guard let code = form["code"], let grant = state.grants.withLock({ $0.removeValue(forKey: code) }),
            clock.seconds() <= grant.expiresAt, form["redirect_uri"] == grant.redirectURI
        else { return error("invalid_grant") }
        let now = clock.seconds()
        let account = grant.account
        var claims: [String: JSONValue] = [
            "iss": .string(issuer), "aud": .string(clientID), "exp": .int(now + 600), "iat": .int(now),
            "sub": .string(account.subject),
            "at_hash": .string(Base64URL.encode(Array(Digest.sha256(code).prefix(16)))),
            "email": .string(account.email), "auth_time": .int(now), "nonce_supported": true,
            "real_user_status": 2,
        ]
        // As Apple sends them: strings for an address's flags.
        claims["email_verified"] = "true"
        if account.privateRelay { claims["is_private_email"] = "true" }
        if let nonce = grant.nonce { claims["nonce"] = .string(nonce) }
        let accessToken = "a" + (try SecureRandom.token(byteCount: 24)) + ".0.emul"
        return .json(
            status: 200,
            .object([
                "access_token": .string(accessToken), "token_type": "bearer", "expires_in": 3600,
                "refresh_token": .string("r" + (try SecureRandom.token(byteCount: 24)) + ".0.emul"),
                "id_token": .string(try state.signer.sign(claims: claims)),
            ]))
    }

    package static let emulator = ProviderEmulator(
        path: "apple", summary: "/apple (Sign in with Apple: form_post, client-secret JWT); test users ada, relay"
    ) { routes in
        let state = try State()
        let server = routes.base
        let clock = routes.clock
        let approveAs = routes.approveAs
        // The issuer is the host the emulator is reached at (`127.0.0.1` or `localhost`: another site, so that a
        // browser's form post to the broker is cross-site, as Apple's is).
        let base: @Sendable (Request) -> String = { request in
            request.head.authority.map { "http://\($0)/apple" } ?? server.value + "/apple"
        }
        routes.get("/apple/.well-known/openid-configuration") { request, _ in
            let base = { base(request) }
            return .json(
                status: 200,
                .object([
                    "issuer": .string(base()), "authorization_endpoint": .string(base() + "/auth/authorize"),
                    "token_endpoint": .string(base() + "/auth/token"), "jwks_uri": .string(base() + "/auth/keys"),
                    "response_types_supported": ["code", "code id_token", "id_token"],
                    "response_modes_supported": ["query", "fragment", "form_post"],
                    "subject_types_supported": ["pairwise"], "id_token_signing_alg_values_supported": ["RS256"],
                    "scopes_supported": ["openid", "email", "name"],
                    "token_endpoint_auth_methods_supported": ["client_secret_post"],
                ]))
        }
        routes.get("/apple/auth/keys") { _, _ in
            let jwk = try state.signer.key.jwk()
            return .json(
                status: 200,
                .object([
                    "keys": [
                        .object([
                            "kty": "RSA", "kid": .string(state.signer.kid), "use": "sig", "alg": "RS256",
                            "n": .string(jwk.n ?? ""), "e": .string(jwk.e ?? ""),
                        ])
                    ]
                ]))
        }
        routes.get("/apple/auth/authorize") { request, _ in
            let query = EmulatorRoutes.query(request)
            if let refusal = refusal(query) { return refusal }
            let page = OpenIDEmulator.consentPage(
                title: "Sign in with Apple (emulated)", hidden: query,
                users: accounts.map { ($0.id, "\($0.firstName) \($0.lastName) <\($0.email)>") }, action: "authorize")
            return OpenIDEmulator.approvingAtOnce(query, approveAs: approveAs, page: page) {
                try consent($0, state: state, clock: clock)
            }
        }
        routes.post("/apple/auth/authorize") { request, _ in
            try consent(try await EmulatorRoutes.form(request), state: state, clock: clock)
        }
        routes.post("/apple/auth/token") { request, _ in
            try token(try await EmulatorRoutes.form(request), state: state, issuer: base(request), clock: clock)
        }
    }
}
