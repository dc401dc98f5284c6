package import BrokerCore
import BrokerCrypto
package import BrokerHTTPTypes
package import ProviderSupport
import TwitterSchema

/// Twitter / X with `"mode": "oauth1"`: the OAuth 1.0a three-legged flow, every request signed with
/// HMAC-SHA1 per RFC 5849. `request_token` (with `oauth_callback`, answered with
/// `oauth_callback_confirmed=true` or refused), the browser to `authorize`, `access_token` with the
/// `oauth_verifier`, then `verify_credentials`. The request token's secret travels to the callback in the
/// broker's sealed cookie (``AuthorizationStart/carry``), and the `oauth_token` coming back must be the
/// request token issued for this sign-in.
package final class TwitterOAuth1Provider: IdentityProvider {
    package static let defaults = TwitterSchema.oauth1Defaults

    let consumerKey: String
    let consumerSecret: Secret
    let requestTokenEndpoint: EndpointURL
    let authorizeEndpoint: EndpointURL
    let accessTokenEndpoint: EndpointURL
    let verifyCredentialsEndpoint: EndpointURL
    let http: @Sendable () -> any HTTPTransport
    let clock: any WallClock
    /// Where OAuth nonces come from; a failure fails the request (never an empty or reused nonce).
    let nonce: @Sendable () throws -> String

    package var id: ProviderID { Twitter.id }

    package init(
        _ section: ProviderSection,
        http: @escaping @Sendable () -> any HTTPTransport,
        clock: any WallClock,
        nonce: @escaping @Sendable () throws -> String = { try SecureRandom.token(byteCount: 16) }
    ) throws(ProviderError) {
        (consumerKey, consumerSecret) = try section.credentials(
            "consumer_key", "consumer_secret", label: "twitter (mode oauth1)")
        func endpoint(_ key: String) throws(ProviderError) -> EndpointURL {
            // The defaults table names every key asked for here; "" would fail the endpoint rule, not crash.
            try section.endpoint(key, default: Self.defaults[key] ?? "")
        }
        requestTokenEndpoint = try endpoint("request_token_endpoint")
        authorizeEndpoint = try endpoint("authorize_endpoint")
        accessTokenEndpoint = try endpoint("access_token_endpoint")
        verifyCredentialsEndpoint = try endpoint("verify_credentials_endpoint")
        self.http = http
        self.clock = clock
        self.nonce = nonce
    }

    package func authorizationURL(for pending: PendingSignIn) async throws(ProviderError) -> String {
        try await start(for: pending).url
    }

    package func complete(callback: [String: String], pending: PendingSignIn) async throws(ProviderError) -> Identity {
        try await complete(callback: callback, pending: pending, carry: [:])
    }

    package func start(for pending: PendingSignIn) async throws(ProviderError) -> AuthorizationStart {
        let callback = pending.callbackURL + "?" + FormEncoding.encode([("state", pending.state)])
        let answer = try await signedPost(
            requestTokenEndpoint.url, extra: [("oauth_callback", callback)], token: nil, tokenSecret: nil)
        let (token, secret) = try Self.requestToken(answer)
        let url = authorizeEndpoint.with(query: [("oauth_token", token)])
        return AuthorizationStart(url: url, carry: ["token": token, "secret": secret])
    }

    package func complete(callback: [String: String], pending: PendingSignIn, carry: [String: String])
        async throws(ProviderError) -> Identity
    {
        guard let requestToken = carry["token"], let requestSecret = carry["secret"] else {
            throw .invalidResponse("the request token of this sign-in is missing (cookies blocked?)")
        }
        if let denied = callback["denied"] {
            guard ConstantTime.equals(denied, requestToken) else {
                throw .invalidResponse("a refusal for another request token")
            }
            throw .denied(code: "access_denied", description: "the authorization was refused at X")
        }
        guard let returned = callback["oauth_token"], ConstantTime.equals(returned, requestToken) else {
            throw .invalidResponse("oauth_token is not the request token issued for this sign-in")
        }
        guard let verifier = callback["oauth_verifier"], !verifier.isEmpty else {
            throw .invalidResponse("the callback carries no oauth_verifier")
        }
        let access = try await signedPost(
            accessTokenEndpoint.url, extra: [("oauth_verifier", verifier)], token: requestToken,
            tokenSecret: Secret(requestSecret))
        let (token, secret) = try Self.accessToken(access)
        let url = verifyCredentialsEndpoint.url
        guard let signed = try sign("GET", url, extra: [], token: token, tokenSecret: Secret(secret)) else {
            throw .invalidResponse("verify_credentials_endpoint is not an http(s) URL")
        }
        let me = try await OAuth2Support.getJSON(
            url, headers: [(name: "Authorization", value: OAuth1.authorizationHeader(signed))], http: http())
        return try Self.identity(me, access: access)
    }

    // The readings of X's answers, pure so that they can be fuzzed (`Fuzz/oauth1`).

    /// The request token and its secret from `request_token`'s answer, which must confirm the callback.
    package static func requestToken(_ answer: [String: String]) throws(ProviderError) -> (String, String) {
        guard answer["oauth_callback_confirmed"] == "true" else {
            throw .invalidResponse("request_token did not confirm the callback (oauth_callback_confirmed)")
        }
        guard let token = answer["oauth_token"], !token.isEmpty, let secret = answer["oauth_token_secret"] else {
            throw .invalidResponse("request_token answered without oauth_token and oauth_token_secret")
        }
        return (token, secret)
    }

    /// The access token and its secret from `access_token`'s answer.
    package static func accessToken(_ answer: [String: String]) throws(ProviderError) -> (String, String) {
        guard let token = answer["oauth_token"], let secret = answer["oauth_token_secret"] else {
            throw .invalidResponse("access_token answered without a token")
        }
        return (token, secret)
    }

    /// The identity in `verify_credentials`' answer: a numeric `id_str` that is the access token's `user_id`.
    package static func identity(_ me: [String: JSONValue], access: [String: String]) throws(ProviderError) -> Identity
    {
        guard let id = me["id_str"]?.stringValue, id.isASCIIDigits, id.utf8.count <= 32,
            access["user_id"].map({ $0 == id }) ?? true
        else { throw .invalidResponse("verify_credentials has no numeric id_str (or it is not the token's user)") }
        return Identity(subject: id, email: nil, emailVerified: false, name: me["name"]?.stringValue)
    }

    /// A form-encoded answer (`oauth_token=…&…`) as fields, the last of a repeated name winning; `nil` when the
    /// status is not 200 or the body is not form encoding.
    package static func formAnswer(status: Int, body: String) -> [String: String]? {
        guard status == 200, let pairs = FormEncoding.decode(body) else { return nil }
        var fields: [String: String] = [:]
        for (name, value) in pairs { fields[name] = value }
        return fields
    }

    /// The request's OAuth parameters, signed; `nil` when `url` is not an http(s) URL.
    /// - Throws: when no nonce can be drawn: the request is not sent rather than sent with a weak nonce.
    func sign(_ method: String, _ url: String, extra: [(String, String)], token: String?, tokenSecret: Secret?)
        throws(ProviderError) -> [(String, String)]?
    {
        let nonce: String
        do {
            nonce = try self.nonce()
        } catch {
            throw .unavailable("no random nonce for the OAuth 1.0a request: \(error)")
        }
        guard !nonce.isEmpty else { throw .unavailable("no random nonce for the OAuth 1.0a request") }
        return OAuth1.sign(
            method: method, url: url, consumerKey: consumerKey, consumerSecret: consumerSecret, token: token,
            tokenSecret: tokenSecret, extra: extra, nonce: nonce, timestamp: clock.seconds())
    }

    /// A signed POST with an empty body, whose answer is form-encoded (`oauth_token=…&…`).
    func signedPost(_ url: String, extra: [(String, String)], token: String?, tokenSecret: Secret?)
        async throws(ProviderError) -> [String: String]
    {
        if let problem = Endpoint.problem(url) { throw .invalidResponse("\(url) \(problem)") }
        guard let signed = try sign("POST", url, extra: extra, token: token, tokenSecret: tokenSecret) else {
            throw .invalidResponse("\(url) is not an http(s) URL")
        }
        var request = HTTPClientRequest(
            method: "POST", url: url,
            headers: [
                (name: "Authorization", value: OAuth1.authorizationHeader(signed)),
                (name: "Content-Type", value: "application/x-www-form-urlencoded"),
            ], body: [])
        request.maxResponseBytes = 64 * 1024
        let response: HTTPClientResponse
        do {
            response = try await http().send(request)
        } catch {
            throw .unavailable("\(url): \(error)")
        }
        guard let fields = Self.formAnswer(status: response.status, body: response.bodyText) else {
            throw .invalidResponse("\(url) refused: HTTP \(response.status) \(response.bodyText.prefix(200))")
        }
        return fields
    }
}
