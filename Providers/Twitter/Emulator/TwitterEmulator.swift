import BrokerCore
import BrokerCrypto
import HTTPTypes
import Hummingbird
package import ProviderEmulators

/// X (Twitter) under `/twitter`, for `broker emulate`: OAuth 2.0 (`/i/oauth2`, `/2`; PKCE S256 required, the
/// token endpoint takes HTTP Basic only, as X does for confidential clients) and OAuth 1.0a (`/oauth`, `/1.1`;
/// ``OAuth1Emulator``). Both sign in the same test users.
package enum TwitterEmulator {
    package static let clientID = "ZW11bGF0ZWQtdHdpdHRlci1jbGllbnQ"
    package static let clientSecret = "emulated-twitter-client-secret"

    package static let dialect = OAuth2Emulator.Dialect(
        name: "X", clientID: clientID, clientSecret: clientSecret,
        accounts: [
            .init(id: "grace", userID: "2244994945", name: "Grace Example", email: nil),
            .init(id: "heidi", userID: "783214", name: "Heidi Example", email: nil),
        ],
        madeUp: { name in
            let digits = Digest.sha256(name).map { String($0 % 10) }.joined()
            return .init(id: name, userID: "1" + digits.prefix(17), name: name, email: nil)
        },
        refuseAuthorization: { query in
            guard query["response_type"] == "code", query["code_challenge_method"] == "S256",
                let challenge = query["code_challenge"], (43...128).contains(challenge.utf8.count)
            else {
                return .page(status: 400, html: OpenIDEmulator.page("X: invalid request", "PKCE (S256) is required."))
            }
            return nil
        },
        denial: [("error", "access_denied")],
        basicAuthentication: true, requiresGrantType: true,
        error: { status, code, message in
            .json(status: status, .object(["error": .string(code), "error_description": .string(message)]))
        },
        tokenPrefix: "", tokenLifetime: 7200,
        invalidToken: .json(status: 401, .object(["title": "Unauthorized", "detail": "Unauthorized", "status": 401])),
        profile: { account, _, _, _ in
            .json(
                status: 200,
                .object([
                    "data": .object([
                        "id": .string(account.userID), "name": .string(account.name), "username": .string(account.id),
                    ])
                ]))
        })

    package static let emulator = ProviderEmulator(
        path: "twitter",
        summary:
            "/twitter (OAuth 2.0 under /i/oauth2 and /2, OAuth 1.0a under /oauth and /1.1); test users grace, heidi"
    ) { routes in
        let twitter = OAuth2Emulator(dialect, approveAs: routes.approveAs, clock: routes.clock)
        routes.get("/twitter/i/oauth2/authorize") { request, _ in twitter.authorize(EmulatorRoutes.query(request)) }
        routes.post("/twitter/i/oauth2/authorize") { request, _ in
            try twitter.consent(try await EmulatorRoutes.form(request))
        }
        routes.post("/twitter/2/oauth2/token") { request, _ in
            try twitter.token(try await EmulatorRoutes.form(request), authorization: request.headers[.authorization])
        }
        routes.get("/twitter/2/users/me") { request, _ in
            twitter.me(EmulatorRoutes.query(request), authorization: request.headers[.authorization])
        }

        // OAuth 1.0a: signatures are checked over the URL the client used.
        let oauth1 = OAuth1Emulator(approveAs: routes.approveAs, clock: routes.clock)
        let server = routes.base
        routes.post("/twitter/oauth/request_token") { request, _ in
            try oauth1.requestToken(
                url: server.fullURL(request), authorization: request.headers[.authorization],
                body: try await EmulatorRoutes.formPairs(request))
        }
        routes.get("/twitter/oauth/authorize") { request, _ in oauth1.authorize(EmulatorRoutes.query(request)) }
        routes.post("/twitter/oauth/authorize") { request, _ in
            try oauth1.consent(try await EmulatorRoutes.form(request))
        }
        routes.post("/twitter/oauth/access_token") { request, _ in
            try oauth1.accessToken(
                url: server.fullURL(request), authorization: request.headers[.authorization],
                body: try await EmulatorRoutes.formPairs(request))
        }
        routes.get("/twitter/1.1/account/verify_credentials.json") { request, _ in
            oauth1.verifyCredentials(url: server.fullURL(request), authorization: request.headers[.authorization])
        }
    }
}
