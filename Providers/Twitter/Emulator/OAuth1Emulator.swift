package import BrokerCore
import BrokerCrypto
package import ProviderEmulators
import Synchronization
import Twitter

/// X's OAuth 1.0a endpoints, emulated: every request's HMAC-SHA1 signature is checked (RFC 5849 §3.4 over
/// the URL the client used), as are the consumer key, the timestamp window (±5 min) and nonce reuse; the
/// request token must come back with its verifier, once.
package final class OAuth1Emulator: Sendable {
    package static let consumerKey = "emulated-consumer-key"
    package static let consumerSecret = "emulated-consumer-secret"

    struct RequestToken {
        let secret: String
        let callback: String
        var verifier: String?
        var account: OAuth2Emulator.Account?
    }

    struct AccessToken {
        let secret: String
        let account: OAuth2Emulator.Account
    }

    static let accounts = TwitterEmulator.dialect.accounts

    private let requestTokens = Mutex<[String: RequestToken]>([:])
    private let accessTokens = Mutex<[String: AccessToken]>([:])
    private let nonces = Mutex<Set<String>>([])
    let clock: any WallClock

    let approveAs: String?

    package init(approveAs: String? = nil, clock: any WallClock) {
        self.approveAs = approveAs
        self.clock = clock
    }

    /// Checks a request's OAuth signature; returns its protocol parameters, or the refusal.
    func verify(
        method: String, url: String, authorization: String?, body: [(String, String)], tokenSecret: (String) -> String?
    )
        -> Result<[String: String], OpenIDEmulator.Reply>
    {
        func refuse(_ message: String) -> Result<[String: String], OpenIDEmulator.Reply> {
            .failure(
                .json(status: 401, .object(["errors": .array([.object(["code": 32, "message": .string(message)])])])))
        }
        guard let authorization, let oauth = OAuth1.parseAuthorization(authorization) else {
            return refuse("Could not authenticate you.")
        }
        var fields: [String: String] = [:]
        for (name, value) in oauth { fields[name] = value }
        guard fields["oauth_consumer_key"] == Self.consumerKey, fields["oauth_signature_method"] == "HMAC-SHA1",
            let nonce = fields["oauth_nonce"], let timestamp = fields["oauth_timestamp"].flatMap({ Int64($0) }),
            let signature = fields["oauth_signature"]
        else { return refuse("Could not authenticate you.") }
        guard abs(clock.seconds() - timestamp) <= 300 else { return refuse("Timestamp out of bounds.") }
        var secret: String? = ""
        if let token = fields["oauth_token"] { secret = tokenSecret(token) }
        guard let secret,
            let base = OAuth1.signatureBaseString(method: method, url: url, parameters: oauth + body)
        else { return refuse("Invalid or expired token.") }
        let expected = OAuth1.signature(
            baseString: base, consumerSecret: Secret(Self.consumerSecret), tokenSecret: Secret(secret))
        guard ConstantTime.equals(signature, expected) else { return refuse("Could not authenticate you.") }
        guard nonces.withLock({ $0.insert(nonce).inserted }) else { return refuse("Nonce already used.") }
        return .success(fields)
    }

    /// `POST /twitter/oauth/request_token`.
    package func requestToken(url: String, authorization: String?, body: [(String, String)]) throws
        -> OpenIDEmulator.Reply
    {
        switch verify(method: "POST", url: url, authorization: authorization, body: body, tokenSecret: { _ in nil }) {
        case .failure(let reply): return reply
        case .success(let fields):
            guard let callback = fields["oauth_callback"], callback.hasPrefix("http") else {
                return .json(
                    status: 403,
                    .object([
                        "errors": .array([
                            .object([
                                "code": 417,
                                "message": "Desktop applications only support the oauth_callback value 'oob'",
                            ])
                        ])
                    ]))
            }
            let token = try SecureRandom.token(byteCount: 16)
            let secret = try SecureRandom.token(byteCount: 24)
            requestTokens.withLock { $0[token] = RequestToken(secret: secret, callback: callback) }
            return .text(
                FormEncoding.encode([
                    ("oauth_token", token), ("oauth_token_secret", secret), ("oauth_callback_confirmed", "true"),
                ]))
        }
    }

    /// `GET /twitter/oauth/authorize?oauth_token=…`: the consent page; `approve_as=USER` (or
    /// `--approve-as`) approves at once.
    package func authorize(_ query: [String: String]) -> OpenIDEmulator.Reply {
        OpenIDEmulator.approvingAtOnce(query, approveAs: approveAs, page: consentPage(query), consent: consent)
    }

    func consentPage(_ query: [String: String]) -> OpenIDEmulator.Reply {
        guard let token = query["oauth_token"], requestTokens.withLock({ $0[token] }) != nil else {
            return .page(status: 400, html: OpenIDEmulator.page("X: invalid request", "This page is no longer valid."))
        }
        return OpenIDEmulator.consentPage(
            title: "Authorize app (emulated X)", hidden: ["oauth_token": token],
            users: Self.accounts.map { ($0.id, $0.name) }, action: "authorize", allow: "Authorize app")
    }

    /// `POST /twitter/oauth/authorize`: back to the callback with the verifier, or `denied`.
    package func consent(_ form: [String: String]) throws -> OpenIDEmulator.Reply {
        guard let token = form["oauth_token"], let pending = requestTokens.withLock({ $0[token] }) else {
            return consentPage(form)
        }
        let separator = pending.callback.contains("?") ? "&" : "?"
        let typed = form["typed_user"].flatMap { $0.isEmpty ? nil : $0 }.map {
            TwitterEmulator.dialect.account(named: $0)
        }
        guard form["decision"] == "allow",
            let account = typed ?? Self.accounts.first(where: { $0.id == form["account"] })
        else {
            requestTokens.withLock { _ = $0.removeValue(forKey: token) }
            return .redirect(pending.callback + separator + FormEncoding.encode([("denied", token)]))
        }
        let verifier = try SecureRandom.token(byteCount: 16)
        requestTokens.withLock {
            $0[token]?.verifier = verifier
            $0[token]?.account = account
        }
        return .redirect(
            pending.callback + separator + FormEncoding.encode([("oauth_token", token), ("oauth_verifier", verifier)]))
    }

    /// `POST /twitter/oauth/access_token`.
    package func accessToken(url: String, authorization: String?, body: [(String, String)]) throws
        -> OpenIDEmulator.Reply
    {
        let result = verify(
            method: "POST", url: url, authorization: authorization, body: body,
            tokenSecret: { token in self.requestTokens.withLock { $0[token]?.secret } })
        switch result {
        case .failure(let reply): return reply
        case .success(let fields):
            guard let token = fields["oauth_token"],
                let pending = requestTokens.withLock({ $0.removeValue(forKey: token) }),
                let verifier = pending.verifier, let account = pending.account,
                let presented = fields["oauth_verifier"] ?? body.first(where: { $0.0 == "oauth_verifier" })?.1,
                ConstantTime.equals(presented, verifier)
            else {
                return .json(
                    status: 401,
                    .object(["errors": .array([.object(["code": 89, "message": "Invalid or expired token."])])]))
            }
            let access = account.userID + "-" + (try SecureRandom.token(byteCount: 20))
            let secret = try SecureRandom.token(byteCount: 24)
            accessTokens.withLock { $0[access] = AccessToken(secret: secret, account: account) }
            return .text(
                FormEncoding.encode([
                    ("oauth_token", access), ("oauth_token_secret", secret), ("user_id", account.userID),
                    ("screen_name", account.id),
                ]))
        }
    }

    /// `GET /twitter/1.1/account/verify_credentials.json`.
    package func verifyCredentials(url: String, authorization: String?) -> OpenIDEmulator.Reply {
        var account: OAuth2Emulator.Account?
        let result = verify(
            method: "GET", url: url, authorization: authorization, body: [],
            tokenSecret: { token in
                let entry = self.accessTokens.withLock { $0[token] }
                account = entry?.account
                return entry?.secret
            })
        switch result {
        case .failure(let reply): return reply
        case .success:
            guard let account else { return .json(status: 401, .object(["errors": .array([])])) }
            return .json(
                status: 200,
                .object([
                    "id": .int(Int64(account.userID) ?? 0), "id_str": .string(account.userID),
                    "name": .string(account.name), "screen_name": .string(account.id),
                ]))
        }
    }
}
