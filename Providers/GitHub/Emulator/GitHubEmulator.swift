package import BrokerCore
import BrokerCrypto
import HTTPTypes
import Hummingbird
package import ProviderEmulators

/// GitHub as GitHub Enterprise Server lays it out, under `/github` (Config/emulated.json sets `base_url` to it):
/// `login/oauth/authorize`, `login/oauth/access_token` (errors with status 200, as GitHub answers them), and the
/// REST API under `api/v3` — `user` and `user/emails` — which refuses a request without a `User-Agent`, as
/// GitHub's does. PKCE is S256 only.
package enum GitHubEmulator {
    package static let clientID = "Iv1.0e5a7ed0c11e47ab"
    package static let clientSecret = "emulated-github-client-secret-0123456789ab"

    static func oauthError(_ code: String, _ description: String, _ anchor: String) -> JSONValue {
        .object([
            "error": .string(code), "error_description": .string(description),
            "error_uri": .string(
                "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors/#\(anchor)"
            ),
        ])
    }

    /// Test users by login: their numeric ids, names, and whether the primary address is verified.
    static let unverified: Set<String> = ["bob"]

    package static let dialect: OAuth2Emulator.Dialect = {
        var dialect = OAuth2Emulator.Dialect(
            name: "GitHub", clientID: clientID, clientSecret: clientSecret,
            accounts: [
                .init(id: "octocat", userID: "583231", name: "The Octocat", email: "octocat@github.example"),
                .init(id: "bob", userID: "1000002", name: "Bob Unverified", email: "bob@example.net"),
            ],
            madeUp: { name in
                let number = Digest.sha256(name).prefix(3).reduce(0) { $0 * 256 + Int($1) }
                return .init(id: name, userID: String(2_000_000 + number), name: name, email: "\(name)@example.com")
            },
            refuseAuthorization: { query in
                guard query["code_challenge"] != nil, query["code_challenge_method"] != "S256" else { return nil }
                return .page(
                    status: 400,
                    html: OpenIDEmulator.page("GitHub: invalid request", "code_challenge_method must be S256."))
            },
            denial: [
                ("error", "access_denied"), ("error_description", "The user has denied your application access."),
                (
                    "error_uri",
                    "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-authorization-request-errors/#access-denied"
                ),
            ],
            basicAuthentication: false, requiresGrantType: false,
            error: { _, code, message in
                // GitHub answers a refused exchange with 200 and an error body.
                let (name, anchor) =
                    code == "unauthorized_client"
                    ? ("incorrect_client_credentials", "incorrect-client-credentials")
                    : ("bad_verification_code", "bad-verification-code")
                let description =
                    name == "bad_verification_code"
                    ? "The code passed is incorrect or expired."
                    : "The client_id and/or client_secret passed are incorrect."
                _ = message
                return .json(status: 200, oauthError(name, description, anchor))
            },
            tokenPrefix: "gho_", tokenLifetime: 0,
            invalidToken: .json(
                status: 401,
                .object([
                    "message": "Bad credentials", "documentation_url": "https://docs.github.com/rest",
                    "status": "401",
                ])),
            profile: { _, _, _, _ in .json(status: 404, .object(["message": "Not Found"])) })
        dialect.tokenAnswer = { token in
            .object(["access_token": .string(token), "token_type": "bearer", "scope": "read:user,user:email"])
        }
        return dialect
    }()

    /// `GET /user` for `account`: the fields of GitHub's documented example that the broker reads, and more.
    package static func user(_ account: OAuth2Emulator.Account, base: String) -> JSONValue {
        .object([
            "login": .string(account.id), "id": .int(Int64(account.userID) ?? 0),
            "node_id": .string("MDQ6VXNlcj" + account.userID), "type": "User", "site_admin": false,
            "name": .string(account.name), "email": .null, "html_url": .string("\(base)/\(account.id)"),
            "avatar_url": .string("\(base)/avatars/u/\(account.userID)"),
        ])
    }

    /// `GET /user/emails`: the primary address (verified unless the user is one of ``unverified``) and a
    /// verified `users.noreply` one that is not primary.
    package static func emails(_ account: OAuth2Emulator.Account) -> JSONValue {
        .array([
            .object([
                "email": .string(account.email ?? "\(account.id)@example.com"), "primary": true,
                "verified": .bool(!unverified.contains(account.id)), "visibility": "private",
            ]),
            .object([
                "email": .string("\(account.userID)+\(account.id)@users.noreply.github.com"), "primary": false,
                "verified": true, "visibility": .null,
            ]),
        ])
    }

    package static let emulator = ProviderEmulator(
        path: "github", summary: "/github (GitHub Enterprise layout: login/oauth, api/v3); test users octocat, bob"
    ) { routes in
        let github = OAuth2Emulator(dialect, approveAs: routes.approveAs, clock: routes.clock)
        let server = routes.base
        routes.get("/github/login/oauth/authorize") { request, _ in github.authorize(EmulatorRoutes.query(request)) }
        routes.post("/github/login/oauth/authorize") { request, _ in
            try github.consent(try await EmulatorRoutes.form(request))
        }
        routes.post("/github/login/oauth/access_token") { request, _ in
            try github.token(try await EmulatorRoutes.form(request), authorization: nil)
        }
        @Sendable func api(_ request: Request, _ answer: (OAuth2Emulator.Account) -> JSONValue) -> OpenIDEmulator.Reply
        {
            guard request.headers[.userAgent]?.isEmpty == false else {
                return .json(
                    status: 403,
                    .object([
                        "message":
                            "Request forbidden by administrative rules. Please make sure your request has a User-Agent header"
                    ]))
            }
            guard let account = github.account(authorization: request.headers[.authorization]) else {
                return dialect.invalidToken
            }
            return .json(status: 200, answer(account))
        }
        routes.get("/github/api/v3/user") { request, _ in api(request) { user($0, base: server.value + "/github") } }
        routes.get("/github/api/v3/user/emails") { request, _ in api(request, emails) }
    }
}
