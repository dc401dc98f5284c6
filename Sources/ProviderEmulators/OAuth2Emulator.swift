package import BrokerCore
import BrokerCrypto
import Synchronization

/// Facebook Login and X's OAuth 2.0, emulated: a consent page, single-use codes bound to the client, the
/// `redirect_uri` and (for X, where it is mandatory) the PKCE challenge, and the profile endpoint each
/// module reads. Facebook's Graph `me` insists on a correct `appsecret_proof`, as an app with "Require App
/// Secret" does; X's token endpoint insists on HTTP Basic, as it does for confidential clients.
package final class OAuth2Emulator: Sendable {
    package enum Kind: Sendable { case facebook, twitter }

    package struct Account: Sendable {
        package let id: String
        package let userID: String
        package let name: String
        package let email: String?
    }

    package let kind: Kind
    let clientID: String
    let clientSecret: String
    let accounts: [Account]

    package static let facebookAppID = "1234567890123456"
    package static let facebookAppSecret = "emulated-facebook-app-secret"
    package static let twitterClientID = "ZW11bGF0ZWQtdHdpdHRlci1jbGllbnQ"
    package static let twitterClientSecret = "emulated-twitter-client-secret"

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

    package init(_ kind: Kind, approveAs: String? = nil, clock: any WallClock) {
        self.kind = kind
        self.approveAs = approveAs
        self.clock = clock
        switch kind {
        case .facebook:
            clientID = Self.facebookAppID
            clientSecret = Self.facebookAppSecret
            accounts = Self.accounts(for: .facebook)
        case .twitter:
            clientID = Self.twitterClientID
            clientSecret = Self.twitterClientSecret
            accounts = Self.accounts(for: .twitter)
        }
    }

    var name: String { kind == .facebook ? "Facebook" : "X" }

    /// `GET` the dialog / authorize endpoint; `approve_as=USER` (or `--approve-as`) approves at once.
    package func authorize(_ query: [String: String]) -> OpenIDEmulator.Reply {
        let page = consentPage(query)
        guard case .page(200, _) = page, let user = query["approve_as"] ?? approveAs else { return page }
        var form = query
        form["decision"] = "allow"
        form["typed_user"] = user
        return (try? consent(form)) ?? page
    }

    /// ``account(named:kind:)`` for this emulator.
    func account(named name: String) -> Account { Self.account(named: name, kind: kind) }

    /// The test accounts of a provider (X's are shared by its OAuth 2.0 and OAuth 1.0a emulators).
    static func accounts(for kind: Kind) -> [Account] {
        switch kind {
        case .facebook:
            [
                Account(id: "erin", userID: "10158123456789012", name: "Erin Example", email: "erin@example.com"),
                Account(id: "frank", userID: "10158987654321098", name: "Frank No-Email", email: nil),
            ]
        case .twitter:
            [
                Account(id: "grace", userID: "2244994945", name: "Grace Example", email: nil),
                Account(id: "heidi", userID: "783214", name: "Heidi Example", email: nil),
            ]
        }
    }

    /// A known account by id, else one made up (stably) from the typed name.
    static func account(named name: String, kind: Kind) -> Account {
        if let known = accounts(for: kind).first(where: { $0.id == name }) { return known }
        let digits = Digest.sha256(name).map { String($0 % 10) }.joined()
        return kind == .facebook
            ? Account(id: name, userID: "10" + digits.prefix(15), name: name, email: "\(name)@example.com")
            : Account(id: name, userID: "1" + digits.prefix(17), name: name, email: nil)
    }

    func consentPage(_ query: [String: String]) -> OpenIDEmulator.Reply {
        guard query["client_id"] == clientID else {
            return .page(status: 400, html: OpenIDEmulator.page("\(name): invalid client", "Invalid App ID."))
        }
        guard let redirect = query["redirect_uri"], redirect.hasPrefix("http://") || redirect.hasPrefix("https://")
        else { return .page(status: 400, html: OpenIDEmulator.page("\(name): URL blocked", "Invalid redirect_uri.")) }
        if kind == .facebook, query["code_challenge"] != nil, query["code_challenge_method"] != "S256" {
            return .page(
                status: 400, html: OpenIDEmulator.page("Facebook: invalid request", "Unsupported PKCE method."))
        }
        if kind == .twitter {
            guard query["response_type"] == "code", query["code_challenge_method"] == "S256",
                let challenge = query["code_challenge"], (43...128).contains(challenge.utf8.count)
            else {
                return .page(status: 400, html: OpenIDEmulator.page("X: invalid request", "PKCE (S256) is required."))
            }
        }
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
            let account = typed.map(account(named:)) ?? accounts.first(where: { $0.id == form["account"] })
        {
            let code = try SecureRandom.token(byteCount: 24)
            grants.withLock {
                $0[code] = Grant(
                    redirectURI: redirect, challenge: form["code_challenge"], account: account,
                    expiresAt: clock.seconds() + 600)
            }
            fields = [("code", code)]
        } else if kind == .facebook {
            fields = [
                ("error", "access_denied"), ("error_code", "200"), ("error_description", "Permissions error"),
                ("error_reason", "user_denied"),
            ]
        } else {
            fields = [("error", "access_denied")]
        }
        if let state = form["state"] { fields.append(("state", state)) }
        return .redirect(redirect + "?" + FormEncoding.encode(fields))
    }

    /// The token endpoint (Facebook: GET or POST `oauth/access_token`; X: POST `2/oauth2/token`).
    package func token(_ form: [String: String], authorization: String?) throws -> OpenIDEmulator.Reply {
        func error(_ status: Int, _ code: String, _ message: String) -> OpenIDEmulator.Reply {
            if kind == .facebook {
                return .json(
                    status: status,
                    .object(["error": .object(["message": .string(message), "type": "OAuthException", "code": 100])]))
            }
            return .json(status: status, .object(["error": .string(code), "error_description": .string(message)]))
        }
        var id = form["client_id"]
        var secret = form["client_secret"]
        if kind == .twitter {
            guard let authorization, authorization.hasPrefix("Basic "),
                let basic = HTTPBasic.credentials(fromToken: String(authorization.dropFirst(6)))
            else { return error(401, "unauthorized_client", "Missing valid authorization header") }
            (id, secret) = (basic.id, basic.secret)
        }
        guard id == clientID, let secret, ConstantTime.equals(secret, clientSecret) else {
            return error(401, "unauthorized_client", "Error validating client secret.")
        }
        if kind == .twitter && form["grant_type"] != "authorization_code" {
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
        let accessToken = (kind == .facebook ? "EAAB" : "") + (try SecureRandom.token(byteCount: 32))
        tokens.withLock { $0[accessToken] = grant.account }
        return .json(
            status: 200,
            .object([
                "access_token": .string(accessToken), "token_type": "bearer",
                "expires_in": .int(kind == .facebook ? 5_183_944 : 7200),
            ]))
    }

    /// Facebook's Graph `me` (with `appsecret_proof`) or X's `2/users/me`.
    package func me(_ query: [String: String], authorization: String?) -> OpenIDEmulator.Reply {
        let bearer = authorization.flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
        guard let token = bearer ?? query["access_token"], let account = tokens.withLock({ $0[token] }) else {
            if kind == .facebook {
                return .json(
                    status: 400,
                    .object([
                        "error": .object([
                            "message": "Invalid OAuth access token.", "type": "OAuthException", "code": 190,
                        ])
                    ]))
            }
            return .json(status: 401, .object(["title": "Unauthorized", "detail": "Unauthorized", "status": 401]))
        }
        if kind == .twitter {
            return .json(
                status: 200,
                .object([
                    "data": .object([
                        "id": .string(account.userID), "name": .string(account.name), "username": .string(account.id),
                    ])
                ]))
        }
        let expected = HMAC.authenticate(.sha256, key: Array(clientSecret.utf8), data: Array(token.utf8)).hexString
        guard let proof = query["appsecret_proof"], ConstantTime.equals(proof, expected) else {
            return .json(
                status: 400,
                .object([
                    "error": .object([
                        "message": "Invalid appsecret_proof provided in the API argument",
                        "type": "GraphMethodException",
                        "code": 100,
                    ])
                ]))
        }
        let fields = Set((query["fields"] ?? "id,name").split(separator: ",").map(String.init))
        var body: [String: JSONValue] = ["id": .string(account.userID)]
        if fields.contains("name") { body["name"] = .string(account.name) }
        if fields.contains("email"), let email = account.email { body["email"] = .string(email) }
        return .json(status: 200, .object(body))
    }
}
