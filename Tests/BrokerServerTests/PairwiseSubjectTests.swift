import BrokerCore
import BrokerCrypto
import BrokerHTTPTypes
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// Pairwise subjects (OpenID Connect Core 8.1; issue "Certifiable"): an app given them knows its users by a `sub`
/// made for its sector — the same for apps of one sector, different across sectors, never the user id — in its
/// id tokens, access tokens, userinfo, introspection and logout tokens, and as an `id_token_hint`.
@Suite("Pairwise subjects: apps of different sectors cannot match their users up")
struct PairwiseSubjectTests {
    typealias OP = OpenIDProviderTests
    typealias Flow = InProcessBrowserFlowTests
    typealias Registration = ClientRegistrationTests

    /// Apps `a1` and `a2` on app.example, `b` on other.example (pairwise), `plain` on app.example (public).
    static func register(_ broker: InProcessBroker) async throws {
        for (id, uri, pairwise) in [
            ("a1", "https://app.example/one", true), ("a2", "https://app.example/two", true),
            ("b", "https://other.example/cb", true), ("plain", "https://app.example/plain", false),
        ] {
            try await broker.store.createApp(
                AppRecord(
                    clientID: id, secretHash: broker.service.appTokens.secrets.hash(Secret(OP.secret)),
                    redirectURIs: [uri], firstParty: true, createdAt: broker.clock.seconds(),
                    pairwiseSector: pairwise ? try AppRules.sector(of: [uri]).get() : nil))
        }
    }

    /// `app`'s sign-in in `jar`, redeemed: the token response.
    static func signIn(
        _ client: InProcessBroker.Client, _ jar: OP.Jar, app: String, redirect: String, extra: [(String, String)] = []
    ) async throws -> InProcessBroker.Client.Reply {
        let request = [
            ("response_type", "code"), ("client_id", app), ("redirect_uri", redirect),
            ("scope", "openid email offline_access"), ("state", "s"), ("nonce", "n"),
        ]
        let page = try await OP.get(client, OP.authorizeURI(request + extra), jar)
        var answer = page.header("Location")
        if answer == nil {
            answer = OP.destination(try await OP.passwordSignIn(client, page: page, jar, email: "pw@example.com"))
        }
        let destination = try #require(answer)
        let code = try #require(Flow.query(destination)["code"], "\(page.status)")
        return try await client.send(
            .post, "/auth/token",
            headers: [
                .contentType: "application/x-www-form-urlencoded",
                .authorization: HTTPBasic.header(id: app, secret: Secret(OP.secret)).value,
            ],
            body: Array(
                FormEncoding.encode([("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirect)])
                    .utf8))
    }

    @Test func eachSectorKnowsTheUserByItsOwnSubject() async throws {
        let broker = try await InProcessBroker()
        try await Self.register(broker)
        try await broker.test { client in
            let userID = try #require(try await client.register("pw@example.com", OP.password)["user_id"]?.stringValue)
            let jar = OP.Jar()
            var subjects: [String: String] = [:]
            var tokens: [String: InProcessBroker.Client.Reply] = [:]
            for (app, redirect) in [
                ("a1", "https://app.example/one"), ("a2", "https://app.example/two"), ("b", "https://other.example/cb"),
                ("plain", "https://app.example/plain"),
            ] {
                let answer = try await Self.signIn(client, jar, app: app, redirect: redirect)
                #expect(answer.status == 200, "\(app): \(String(describing: answer.json))")
                let idToken = try #require(answer["id_token"]?.stringValue)
                subjects[app] = jwtParts(idToken).claims?["sub"]?.stringValue
                tokens[app] = answer
            }
            #expect(subjects["plain"] == userID, "a public app knows the user id")
            #expect(subjects["a1"] == subjects["a2"], "one sector, one subject")
            #expect(subjects["a1"] != subjects["b"] && subjects["a1"] != userID && subjects["b"] != userID)
            #expect(subjects["a1"]?.contains(userID) == false)

            // The access token says the same sub, works at userinfo, and answers introspection with it.
            let access = try #require(tokens["b"]?["access_token"]?.stringValue)
            #expect(jwtParts(access).claims?["sub"]?.stringValue == subjects["b"])
            let info = try await client.get("/auth/userinfo", bearer: access)
            #expect(info.status == 200 && info["sub"]?.stringValue == subjects["b"], "\(String(describing: info.json))")
            let introspected = try await client.send(
                .post, "/auth/introspect",
                headers: [
                    .contentType: "application/x-www-form-urlencoded",
                    .authorization: HTTPBasic.header(id: "b", secret: Secret(OP.secret)).value,
                ], body: Array(FormEncoding.encode([("token", access)]).utf8))
            #expect(introspected["active"] == true && introspected["sub"]?.stringValue == subjects["b"])
            // A refresh keeps it.
            let refreshed = try await client.send(
                .post, "/auth/token",
                headers: [
                    .contentType: "application/x-www-form-urlencoded",
                    .authorization: HTTPBasic.header(id: "b", secret: Secret(OP.secret)).value,
                ],
                body: Array(
                    FormEncoding.encode([
                        ("grant_type", "refresh_token"),
                        ("refresh_token", try #require(tokens["b"]?["refresh_token"]?.stringValue)),
                    ]).utf8))
            #expect(refreshed.status == 200)
            let refreshedAccess = try #require(refreshed["access_token"]?.stringValue)
            #expect(jwtParts(refreshedAccess).claims?["sub"]?.stringValue == subjects["b"])
            #expect(try await client.get("/auth/userinfo", bearer: refreshedAccess).status == 200)
            // As an id_token_hint, the pairwise id token names the signed-in user.
            let hint = try #require(tokens["b"]?["id_token"]?.stringValue)
            let silent = try await Self.signIn(
                client, jar, app: "b", redirect: "https://other.example/cb",
                extra: [("prompt", "none"), ("id_token_hint", hint)])
            #expect(silent.status == 200)
        }
    }

    /// RFC 7591 with `subject_type: pairwise`: the sector is the sector_identifier_uri's host when its document
    /// lists every redirect URI (oidcc-registration-sector-uri), refused when it does not (-sector-bad) or when
    /// there are several hosts and no such document.
    @Test func anAppRegistersForPairwiseSubjectsWithItsSector() async throws {
        let broker = try await Registration.broker("token")
        let tokens = try await Registration.initialTokens(broker, count: 4)
        let sectorURL = "https://sector.example/redirects.json"
        let badURL = "https://sector.example/bad.json"
        broker.transport.onJSON("GET", sectorURL, ["https://one.example/cb", "https://two.example/cb"])
        broker.transport.onJSON("GET", badURL, ["https://one.example/cb"])
        let base: JSONValue = [
            "redirect_uris": ["https://one.example/cb", "https://two.example/cb"], "subject_type": "pairwise",
        ]
        try await broker.test { client in
            let noSector = try await Registration.register(client, base, token: tokens[0])
            #expect(noSector.status == 400 && noSector.error == "invalid_client_metadata")
            #expect(noSector["error_description"]?.stringValue?.contains("more than one host") == true)
            let bad = try await Registration.register(
                client, Registration.with(base, "sector_identifier_uri", .string(badURL)), token: tokens[0])
            #expect(
                bad.status == 400 && bad["error_description"]?.stringValue?.contains("does not list") == true,
                "\(String(describing: bad.json))")
            let unknown = try await Registration.register(
                client, Registration.with(base, "subject_type", "secret"), token: tokens[0])
            #expect(unknown.status == 400)
            #expect(try await broker.store.apps().isEmpty, "nothing stored")
            let badAlg = try await Registration.register(
                client,
                Registration.with(
                    Registration.with(base, "sector_identifier_uri", .string(sectorURL)),
                    "userinfo_signed_response_alg",
                    "HS256"), token: tokens[0])
            #expect(badAlg.status == 400 && badAlg.error == "invalid_client_metadata")
            // oidcc-registration-logo-uri, -policy-uri, -tos-uri: taken (and ignored, RFC 7591 §2).
            var full = Registration.with(
                Registration.with(base, "sector_identifier_uri", .string(sectorURL)), "userinfo_signed_response_alg",
                "RS256")
            for member in ["logo_uri", "policy_uri", "tos_uri"] {
                full = Registration.with(full, member, .string("https://one.example/\(member)"))
            }
            let good = try await Registration.register(client, full, token: tokens[0])
            #expect(good.status == 201 && good["subject_type"] == "pairwise", "\(String(describing: good.json))")
            #expect(good["userinfo_signed_response_alg"] == "RS256")
            let app = try #require(try await broker.store.apps().first)
            #expect(app.pairwiseSector == "sector.example" && app.userinfoAlgorithm == "RS256")
        }
        let fetch = try #require(broker.transport.sent.first { $0.url == sectorURL })
        #expect(fetch.publicAddressesOnly)
    }
}
