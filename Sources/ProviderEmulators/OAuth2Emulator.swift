package import BrokerCore
import BrokerCrypto
import Synchronization

/// A plain OAuth 2.0 provider's endpoints, emulated: a consent page, single-use codes bound to the client, the
/// `redirect_uri` and the PKCE challenge when one was sent, and the profile endpoint each module reads. What
/// differs between providers — which requests they refuse, how they authenticate clients, their error and
/// profile shapes — is the ``Dialect`` a provider's folder declares (`Providers/Facebook/Emulator`,
/// `Providers/Twitter/Emulator`).
package final class OAuth2Emulator: Sendable {
    package struct Account: Sendable {
        package let id: String
        package let userID: String
        package let name: String
        package let email: String?

        package init(id: String, userID: String, name: String, email: String?) {
            self.id = id
            self.userID = userID
            self.name = name
            self.email = email
        }
    }

    /// One provider's ways.
    package struct Dialect: Sendable {
        /// As the pages name it ("Facebook", "X").
        package let name: String
        package let clientID: String
        package let clientSecret: String
        package let accounts: [Account]
        /// The account for a typed test user that is not one of ``accounts``, made up (stably) from the name.
        package let madeUp: @Sendable (String) -> Account
        /// What the provider refuses in an authorization request beyond an unknown client or a missing
        /// `redirect_uri` (its PKCE rules): the page it shows, or `nil` to go on.
        package let refuseAuthorization: @Sendable ([String: String]) -> OpenIDEmulator.Reply?
        /// The redirect's fields when the user cancels (before `state`).
        package let denial: [(String, String)]
        /// Client authentication at the token endpoint by HTTP Basic only (X's confidential clients); otherwise
        /// by `client_id` and `client_secret` parameters.
        package let basicAuthentication: Bool
        /// Whether the token request must say `grant_type=authorization_code`.
        package let requiresGrantType: Bool
        /// An error answer of the token endpoint: status, OAuth error code, message.
        package let error: @Sendable (Int, String, String) -> OpenIDEmulator.Reply
        /// What access tokens start with, and their lifetime in seconds.
        package let tokenPrefix: String
        package let tokenLifetime: Int64
        /// The profile endpoint's answer to an unknown or missing access token.
        package let invalidToken: OpenIDEmulator.Reply
        /// The profile endpoint's answer for `account`, reached with `token` and the request's `query` (the
        /// client secret for checks such as Facebook's `appsecret_proof`).
        package let profile:
            @Sendable (_ account: Account, _ token: String, _ query: [String: String], _ secret: String)
                -> OpenIDEmulator.Reply
        /// The token endpoint's success body for a new access token, when it is not the usual
        /// `{access_token, token_type, expires_in}` (GitHub's has `scope` and no lifetime).
        package var tokenAnswer: (@Sendable (String) -> JSONValue)? = nil

        package init(
            name: String, clientID: String, clientSecret: String, accounts: [Account],
            madeUp: @escaping @Sendable (String) -> Account,
            refuseAuthorization: @escaping @Sendable ([String: String]) -> OpenIDEmulator.Reply?,
            denial: [(String, String)], basicAuthentication: Bool, requiresGrantType: Bool,
            error: @escaping @Sendable (Int, String, String) -> OpenIDEmulator.Reply, tokenPrefix: String,
            tokenLifetime: Int64, invalidToken: OpenIDEmulator.Reply,
            profile: @escaping @Sendable (Account, String, [String: String], String) -> OpenIDEmulator.Reply
        ) {
            self.name = name
            self.clientID = clientID
            self.clientSecret = clientSecret
            self.accounts = accounts
            self.madeUp = madeUp
            self.refuseAuthorization = refuseAuthorization
            self.denial = denial
            self.basicAuthentication = basicAuthentication
            self.requiresGrantType = requiresGrantType
            self.error = error
            self.tokenPrefix = tokenPrefix
            self.tokenLifetime = tokenLifetime
            self.invalidToken = invalidToken
            self.profile = profile
        }

        /// A known account by id, else the made-up one.
        package func account(named name: String) -> Account {
            accounts.first { $0.id == name } ?? madeUp(name)
        }
    }

    package let dialect: Dialect
    var clientID: String { dialect.clientID }
    var accounts: [Account] { dialect.accounts }
    var name: String { dialect.name }

    struct Grant {
        let redirectURI: String
        let challenge: String?
        let account: Account
        let expiresAt: Int64
    }

    private let grants = Mutex<[String: Grant]>([:])
    private let tokens = Mutex<[String: Account]>([:])
    let clock: any WallClock

    let approveAs: String?

    package init(_ dialect: Dialect, approveAs: String? = nil, clock: any WallClock) {
        self.dialect = dialect
        self.approveAs = approveAs
        self.clock = clock
    }

    /// `GET` the dialog / authorize endpoint; `approve_as=USER` (or `--approve-as`) approves at once.
    package func authorize(_ query: [String: String]) -> OpenIDEmulator.Reply {
        OpenIDEmulator.approvingAtOnce(query, approveAs: approveAs, page: consentPage(query), consent: consent)
    }

    func consentPage(_ query: [String: String]) -> OpenIDEmulator.Reply {
        guard query["client_id"] == clientID else {
            return .page(status: 400, html: OpenIDEmulator.page("\(name): invalid client", "Invalid App ID."))
        }
        guard let redirect = query["redirect_uri"], redirect.hasPrefix("http://") || redirect.hasPrefix("https://")
        else { return .page(status: 400, html: OpenIDEmulator.page("\(name): URL blocked", "Invalid redirect_uri.")) }
        if let refusal = dialect.refuseAuthorization(query) { return refusal }
        return OpenIDEmulator.consentPage(
            title: "Log in with \(name) (emulated)", hidden: query, users: accounts.map { ($0.id, $0.name) }, action: ""
        )
    }

    /// `POST` of the consent form.
    package func consent(_ form: [String: String]) throws -> OpenIDEmulator.Reply {
        guard case .page(200, _) = consentPage(form), let redirect = form["redirect_uri"] else {
            return consentPage(form)
        }
        var fields: [(String, String)]
        let typed = form["typed_user"].flatMap { $0.isEmpty ? nil : $0 }
        if form["decision"] == "allow",
            let account = typed.map(dialect.account(named:)) ?? accounts.first(where: { $0.id == form["account"] })
        {
            let code = try SecureRandom.token(byteCount: 24)
            grants.withLock {
                $0[code] = Grant(
                    redirectURI: redirect, challenge: form["code_challenge"], account: account,
                    expiresAt: clock.seconds() + 600)
            }
            fields = [("code", code)]
        } else {
            fields = dialect.denial
        }
        if let state = form["state"] { fields.append(("state", state)) }
        return .redirect(redirect + "?" + FormEncoding.encode(fields))
    }

    /// The token endpoint (Facebook: GET or POST `oauth/access_token`; X: POST `2/oauth2/token`).
    package func token(_ form: [String: String], authorization: String?) throws -> OpenIDEmulator.Reply {
        let error = dialect.error
        var id = form["client_id"]
        var secret = form["client_secret"]
        if dialect.basicAuthentication {
            guard let authorization, authorization.hasPrefix("Basic "),
                let basic = HTTPBasic.credentials(fromToken: String(authorization.dropFirst(6)))
            else { return error(401, "unauthorized_client", "Missing valid authorization header") }
            (id, secret) = (basic.id, basic.secret)
        }
        guard id == clientID, let secret, ConstantTime.equals(secret, dialect.clientSecret) else {
            return error(401, "unauthorized_client", "Error validating client secret.")
        }
        if dialect.requiresGrantType && form["grant_type"] != "authorization_code" {
            return error(400, "invalid_request", "Value passed for the grant type was invalid.")
        }
        guard let code = form["code"], let grant = grants.withLock({ $0.removeValue(forKey: code) }) else {
            return error(400, "invalid_request", "This authorization code has been used or is invalid.")
        }
        guard clock.seconds() <= grant.expiresAt else {
            return error(400, "invalid_request", "This authorization code has expired.")
        }
        guard form["redirect_uri"] == grant.redirectURI else {
            return error(
                400, "invalid_request",
                "Error validating verification code. Please make sure your redirect_uri is identical to the one you used in the OAuth dialog request"
            )
        }
        if let challenge = grant.challenge {
            guard let verifier = form["code_verifier"], PKCE.verify(verifier: verifier, challenge: challenge) else {
                return error(400, "invalid_request", "Value passed for the authorization code was invalid.")
            }
        }
        let accessToken = dialect.tokenPrefix + (try SecureRandom.token(byteCount: 32))
        tokens.withLock { $0[accessToken] = grant.account }
        if let answer = dialect.tokenAnswer { return .json(status: 200, answer(accessToken)) }
        return .json(
            status: 200,
            .object([
                "access_token": .string(accessToken), "token_type": "bearer",
                "expires_in": .int(dialect.tokenLifetime),
            ]))
    }

    /// The account an `Authorization: Bearer` (or GitHub's `token`) header's access token was issued to.
    package func account(authorization: String?) -> Account? {
        guard let authorization, let space = authorization.firstIndex(of: " ") else { return nil }
        let scheme = authorization[..<space].lowercased()
        guard scheme == "bearer" || scheme == "token" else { return nil }
        return tokens.withLock { $0[String(authorization[authorization.index(after: space)...])] }
    }

    /// The profile endpoint (Facebook's Graph `me`, X's `2/users/me`): the access token from `Authorization:
    /// Bearer` or the `access_token` parameter.
    package func me(_ query: [String: String], authorization: String?) -> OpenIDEmulator.Reply {
        let bearer = authorization.flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
        guard let token = bearer ?? query["access_token"], let account = tokens.withLock({ $0[token] }) else {
            return dialect.invalidToken
        }
        return dialect.profile(account, token, query, dialect.clientSecret)
    }
}
