import BrokerCore
import BrokerCrypto
import HTTPTypes
import Hummingbird
package import ProviderEmulators

/// Facebook Login under `/facebook/v19.0`, for `broker emulate`: the dialog (www.facebook.com) and the Graph
/// API (graph.facebook.com). The Graph `me` insists on a correct `appsecret_proof`, as an app with "Require
/// App Secret" does; a PKCE challenge, when sent, must be S256.
package enum FacebookEmulator {
    package static let appID = "1234567890123456"
    package static let appSecret = "emulated-facebook-app-secret"

    static func graphError(_ status: Int, _ message: String, type: String = "OAuthException", code: Int64)
        -> OpenIDEmulator.Reply
    {
        .json(
            status: status,
            .object(["error": .object(["message": .string(message), "type": .string(type), "code": .int(code)])]))
    }

    package static let dialect = OAuth2Emulator.Dialect(
        name: "Facebook", clientID: appID, clientSecret: appSecret,
        accounts: [
            .init(id: "erin", userID: "10158123456789012", name: "Erin Example", email: "erin@example.com"),
            .init(id: "frank", userID: "10158987654321098", name: "Frank No-Email", email: nil),
        ],
        madeUp: { name in
            let digits = Digest.sha256(name).map { String($0 % 10) }.joined()
            return .init(id: name, userID: "10" + digits.prefix(15), name: name, email: "\(name)@example.com")
        },
        refuseAuthorization: { query in
            guard query["code_challenge"] != nil, query["code_challenge_method"] != "S256" else { return nil }
            return .page(
                status: 400, html: OpenIDEmulator.page("Facebook: invalid request", "Unsupported PKCE method."))
        },
        denial: [
            ("error", "access_denied"), ("error_code", "200"), ("error_description", "Permissions error"),
            ("error_reason", "user_denied"),
        ],
        basicAuthentication: false, requiresGrantType: false,
        error: { status, _, message in graphError(status, message, code: 100) },
        tokenPrefix: "EAAB", tokenLifetime: 5_183_944,
        invalidToken: graphError(400, "Invalid OAuth access token.", code: 190),
        profile: { account, token, query, secret in
            let expected = HMAC.authenticate(.sha256, key: Array(secret.utf8), data: Array(token.utf8)).hexString
            guard let proof = query["appsecret_proof"], ConstantTime.equals(proof, expected) else {
                return graphError(
                    400, "Invalid appsecret_proof provided in the API argument", type: "GraphMethodException", code: 100
                )
            }
            let fields = Set((query["fields"] ?? "id,name").split(separator: ",").map(String.init))
            var body: [String: JSONValue] = ["id": .string(account.userID)]
            if fields.contains("name") { body["name"] = .string(account.name) }
            if fields.contains("email"), let email = account.email { body["email"] = .string(email) }
            return .json(status: 200, .object(body))
        })

    package static let emulator = ProviderEmulator(
        path: "facebook", summary: "/facebook/v19.0 (dialog, Graph); test users erin, frank"
    ) { routes in
        let facebook = OAuth2Emulator(dialect, approveAs: routes.approveAs, clock: routes.clock)
        routes.get("/facebook/v19.0/dialog/oauth") { request, _ in facebook.authorize(EmulatorRoutes.query(request)) }
        routes.post("/facebook/v19.0/dialog/oauth") { request, _ in
            try facebook.consent(try await EmulatorRoutes.form(request))
        }
        routes.get("/facebook/v19.0/oauth/access_token") { request, _ in
            try facebook.token(EmulatorRoutes.query(request), authorization: nil)
        }
        routes.post("/facebook/v19.0/oauth/access_token") { request, _ in
            try facebook.token(try await EmulatorRoutes.form(request), authorization: nil)
        }
        routes.get("/facebook/v19.0/me") { request, _ in
            facebook.me(EmulatorRoutes.query(request), authorization: request.headers[.authorization])
        }
    }
}
