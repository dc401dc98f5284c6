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

/// `private_key_jwt` client authentication (RFC 7523, OpenID Connect Core 9; issue "Certifiable"): an app without
/// a secret signs an assertion with its own key. Every way an assertion can be wrong is refused with
/// `invalid_client`, spends nothing (the code still redeems with a good one), and a replay is refused.
@Suite("private_key_jwt: apps that authenticate with their own keys")
struct PrivateKeyJWTTests {
    typealias OP = OpenIDProviderTests
    typealias Flow = InProcessBrowserFlowTests

    static let keysURL = "https://keys.app.example/jwks.json"

    /// The app `keyed`, first-party, whose public keys are `jwks` (inline) or at ``keysURL``.
    static func register(_ broker: InProcessBroker, key: AsymmetricKey, inline: Bool = true, registered: Bool = false)
        async throws
    {
        let set = JSONValue.object([
            "keys": .array([try JSONValue.parse(JSONEncoder().encode(key.jwk().withKid("k1"))) ?? .null])
        ])
        try await broker.store.createApp(
            AppRecord(
                clientID: "keyed", secretHash: nil, redirectURIs: [OP.web], firstParty: true,
                createdAt: broker.clock.seconds(),
                registration: registered ? AppRecord.Registration(mode: "token", clientName: nil) : nil,
                jwks: inline ? set.serialized() : nil, jwksURI: inline ? nil : keysURL))
        broker.transport.onJSON("GET", keysURL, set)
    }

    /// An assertion for the app `keyed`, with `changes` applied to the claims.
    static func assertion(
        _ key: AsymmetricKey, now: Int64, kid: String = "k1", _ changes: (inout [String: JSONValue]) -> Void = { _ in }
    ) throws -> String {
        var claims: [String: JSONValue] = [
            "iss": "keyed", "sub": "keyed", "aud": "http://broker.test/auth/token", "iat": .int(now),
            "exp": .int(now + 300), "jti": .string(UUID().uuidString),
        ]
        changes(&claims)
        return try JWTSigner(key: key, kid: kid).sign(claims: claims)
    }

    /// A code for `keyed`, signed in as a password user in `jar`.
    static func code(_ client: InProcessBroker.Client, _ jar: OP.Jar) async throws -> String {
        let request = [
            ("response_type", "code"), ("client_id", "keyed"), ("redirect_uri", OP.web), ("scope", "openid email"),
            ("state", "s"), ("nonce", "n"),
        ]
        let page = try await OP.get(client, OP.authorizeURI(request), jar)
        let answer: String
        if let location = page.header("Location") {
            answer = location
        } else {
            answer = try #require(
                OP.destination(try await OP.passwordSignIn(client, page: page, jar, email: "kay@example.com")))
        }
        return try #require(Flow.query(answer)["code"])
    }

    static func redeem(_ client: InProcessBroker.Client, code: String, fields: [(String, String)]) async throws
        -> InProcessBroker.Client.Reply
    {
        try await client.send(
            .post, "/auth/token", headers: [.contentType: "application/x-www-form-urlencoded"],
            body: Array(
                FormEncoding.encode(
                    [("grant_type", "authorization_code"), ("code", code), ("redirect_uri", OP.web)] + fields
                ).utf8))
    }

    static func asserted(_ assertion: String) -> [(String, String)] {
        [
            ("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"),
            ("client_assertion", assertion),
        ]
    }

    @Test(arguments: [true, false])
    func anAppSignsItsOwnAssertionAndEachFlawIsRefused(inline: Bool) async throws {
        let broker = try await InProcessBroker()
        let key = try AsymmetricKey.generate(.ecP256)
        try await Self.register(broker, key: key, inline: inline)
        let now = broker.clock.seconds()
        try await broker.test { client in
            _ = try await client.register("kay@example.com", OP.password)
            let jar = OP.Jar()
            let code = try await Self.code(client, jar)
            let stranger = try AsymmetricKey.generate(.ecP256)
            let flaws: [(String, String)] = [
                (try Self.assertion(stranger, now: now), "does not verify"),
                (try Self.assertion(key, now: now) { $0["aud"] = "https://elsewhere.example/token" }, "aud"),
                (try Self.assertion(key, now: now) { $0["sub"] = "someone" }, "sub"),
                (try Self.assertion(key, now: now) { $0["exp"] = .int(now - 120) }, "does not verify"),
                (try Self.assertion(key, now: now) { $0["exp"] = .int(now + 7200) }, "longer than"),
                (try Self.assertion(key, now: now) { $0["jti"] = nil }, "does not verify"),
                (try Self.assertion(key, now: now) { $0["iss"] = "web" }, "private_key_jwt"),
                ("not.a.jwt", "not a JWT"),
            ]
            for (assertion, reason) in flaws {
                let refused = try await Self.redeem(client, code: code, fields: Self.asserted(assertion))
                #expect(refused.status == 401 && refused.error == "invalid_client", "\(reason)")
                #expect(
                    refused["error_description"]?.stringValue?.contains(reason) == true,
                    "\(String(describing: refused.json))")
            }
            // An assertion beside a secret, or of another type, is no authentication either.
            let both = try await Self.redeem(
                client, code: code, fields: Self.asserted(try Self.assertion(key, now: now)) + [("client_secret", "x")])
            #expect(both.status == 401)
            let otherType = try await Self.redeem(
                client, code: code,
                fields: [
                    ("client_assertion_type", "urn:other"), ("client_assertion", try Self.assertion(key, now: now)),
                ])
            #expect(otherType.status == 401)
            // Nor does nothing: the app has keys, so it is not public.
            #expect(try await Self.redeem(client, code: code, fields: [("client_id", "keyed")]).status == 401)

            // A good one redeems the code, which none of the refusals spent; `aud` may be the issuer too.
            let good = try Self.assertion(key, now: now) { $0["aud"] = .array(["http://broker.test"]) }
            let tokens = try await Self.redeem(client, code: code, fields: Self.asserted(good))
            #expect(tokens.status == 200, "\(String(describing: tokens.json))")
            #expect(tokens["id_token"] != nil)
            // The same assertion again (its jti) is a replay, even for a fresh code.
            let again = try await Self.redeem(
                client, code: try await Self.code(client, jar), fields: Self.asserted(good))
            #expect(again.status == 401 && again["error_description"]?.stringValue?.contains("used before") == true)
        }
        #expect(broker.transport.count("GET", Self.keysURL) == (inline ? 0 : 1), "fetched once, then cached")
    }

    /// oidcc-refresh-token-rp-key-rotation: the app rolls its key at its jwks_uri; an assertion under the new
    /// key's kid makes broker fetch the keys again at once, and it authenticates.
    @Test func anAppThatRollsItsKeyIsRefetchedOnItsNewKid() async throws {
        let broker = try await InProcessBroker()
        let key = try AsymmetricKey.generate(.ecP256)
        let next = try AsymmetricKey.generate(.ecP256)
        try await Self.register(broker, key: key, inline: false)
        let rolled = JSONValue.object([
            "keys": .array([
                try JSONValue.parse(JSONEncoder().encode(next.jwk().withKid("k2"))) ?? .null,
                try JSONValue.parse(JSONEncoder().encode(key.jwk().withKid("k1"))) ?? .null,
            ])
        ])
        let now = broker.clock.seconds()
        try await broker.test { client in
            _ = try await client.register("kay@example.com", OP.password)
            let jar = OP.Jar()
            let first = try await Self.redeem(
                client, code: try await Self.code(client, jar), fields: Self.asserted(try Self.assertion(key, now: now))
            )
            #expect(first.status == 200)
            broker.transport.onJSON("GET", Self.keysURL, rolled)
            let second = try await Self.redeem(
                client, code: try await Self.code(client, jar),
                fields: Self.asserted(try Self.assertion(next, now: now, kid: "k2")))
            #expect(second.status == 200, "\(String(describing: second.json))")
        }
        #expect(broker.transport.count("GET", Self.keysURL) == 2, "fetched again for the new kid, once")
    }

    /// An app that registered itself names its own jwks_uri: it is fetched from public addresses only.
    @Test func aRegisteredAppsKeysAreFetchedFromPublicAddressesOnly() async throws {
        let broker = try await InProcessBroker()
        let key = try AsymmetricKey.generate(.ecP256)
        try await Self.register(broker, key: key, inline: false, registered: true)
        let now = broker.clock.seconds()
        try await broker.test { client in
            _ = try await client.register("kay@example.com", OP.password)
            let code = try await Self.code(client, OP.Jar())
            let tokens = try await Self.redeem(
                client, code: code, fields: Self.asserted(try Self.assertion(key, now: now)))
            #expect(tokens.status == 200)
        }
        let fetch = try #require(broker.transport.sent.first { $0.url == Self.keysURL })
        #expect(fetch.publicAddressesOnly)
    }

    /// oidcc-registration-jwks-uri: an app registers itself (RFC 7591) with private_key_jwt and its jwks_uri, or
    /// its jwks; without keys, with keys for another method, or with a private key, it is refused and nothing is
    /// stored. The registered app then authenticates with its key.
    @Test func anAppRegistersItselfWithItsKeys() async throws {
        let broker = try await ClientRegistrationTests.broker("token")
        let tokens = try await ClientRegistrationTests.initialTokens(broker, count: 3)
        let key = try AsymmetricKey.generate(.ecP256)
        let publicKey = try JSONValue.parse(JSONEncoder().encode(key.jwk())) ?? .null
        let privateKey = try JSONValue.parse(JSONEncoder().encode(key.jwk(includePrivate: true))) ?? .null
        let base: JSONValue = [
            "redirect_uris": ["https://app.example/cb"], "token_endpoint_auth_method": "private_key_jwt",
        ]
        typealias Registration = ClientRegistrationTests
        try await broker.test { client in
            for (metadata, reason) in [
                (base, "jwks or jwks_uri"),
                (Registration.with(base, "jwks", ["keys": [privateKey]]), "private key"),
                (
                    Registration.with(
                        Registration.with(base, "token_endpoint_auth_method", "client_secret_basic"), "jwks_uri",
                        .string(Self.keysURL)), "are for token_endpoint_auth_method private_key_jwt"
                ),
                (Registration.with(base, "jwks_uri", "http://keys.example/jwks"), "https"),
            ] {
                let refused = try await Registration.register(client, metadata, token: tokens[0])
                #expect(refused.status == 400, "\(reason)")
                #expect(
                    refused["error_description"]?.stringValue?.contains(reason) == true,
                    "\(String(describing: refused.json))")
            }
            #expect(try await broker.store.apps().isEmpty, "nothing stored")
            let byURI = try await Registration.register(
                client, Registration.with(base, "jwks_uri", .string(Self.keysURL)), token: tokens[0])
            #expect(byURI.status == 201 && byURI["client_secret"] == nil, "\(String(describing: byURI.json))")
            #expect(
                byURI["token_endpoint_auth_method"] == "private_key_jwt"
                    && byURI["jwks_uri"]?.stringValue == Self.keysURL)
            let inline = try await Registration.register(
                client, Registration.with(base, "jwks", ["keys": [publicKey]]), token: tokens[1])
            #expect(inline.status == 201 && inline["jwks"] != nil)
            let clientID = try #require(inline["client_id"]?.stringValue)
            let app = try #require(try await broker.store.app(clientID: clientID))
            #expect(!app.isPublic && app.authenticatesWithKeys && app.secretHash == nil)
        }
    }

    /// client_secret_jwt: an HS256 assertion under the app's secret, which broker works out again from the salt
    /// and hash it keeps. An app whose secret is of the older, random kind is told to get a new one; the same
    /// secret still works with Basic; an assertion under another secret, or replayed, is refused.
    @Test func anAppSignsAnAssertionWithItsSecret() async throws {
        let broker = try await InProcessBroker()
        let hasher = broker.service.appTokens.secrets
        let (secret, stored) = try hasher.newAppSecret(clientID: "keyed")
        #expect(!stored.contains(secret.exposed), "the store keeps no secret")
        #expect(hasher.appSecret(clientID: "keyed", stored: stored)?.exposed == secret.exposed)
        #expect(hasher.appSecret(clientID: "other", stored: stored) == nil, "derived for its own client id")
        #expect(hasher.verify(secret, against: stored) && !hasher.verify(Secret("guess"), against: stored))
        try await broker.store.createApp(
            AppRecord(
                clientID: "keyed", secretHash: stored, redirectURIs: [OP.web], firstParty: true,
                createdAt: broker.clock.seconds()))
        let now = broker.clock.seconds()
        @Sendable func hs256(_ key: String, _ changes: (inout [String: JSONValue]) -> Void = { _ in }) -> String {
            var claims: [String: JSONValue] = [
                "iss": "keyed", "sub": "keyed", "aud": "http://broker.test/auth/token", "iat": .int(now),
                "exp": .int(now + 300), "jti": .string(UUID().uuidString),
            ]
            changes(&claims)
            let signingInput =
                Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8)) + "."
                + Base64URL.encode(JSONValue.object(claims).serializedBytes)
            let mac = HMAC.authenticate(.sha256, key: Array(key.utf8), data: Array(signingInput.utf8))
            return signingInput + "." + Base64URL.encode(mac)
        }
        try await broker.test { client in
            _ = try await client.register("kay@example.com", OP.password)
            let jar = OP.Jar()
            let code = try await Self.code(client, jar)
            for (assertion, reason) in [
                (hs256("not-the-secret"), "HMAC"), (hs256(secret.exposed) { $0["exp"] = .int(now - 300) }, "expired"),
                (hs256(secret.exposed) { $0["aud"] = "https://elsewhere.example" }, "aud"),
            ] {
                let refused = try await Self.redeem(client, code: code, fields: Self.asserted(assertion))
                #expect(refused.status == 401 && refused.error == "invalid_client", "\(reason)")
                #expect(
                    refused["error_description"]?.stringValue?.contains(reason) == true,
                    "\(String(describing: refused.json))")
            }
            let good = hs256(secret.exposed)
            let tokens = try await Self.redeem(client, code: code, fields: Self.asserted(good))
            #expect(tokens.status == 200, "\(String(describing: tokens.json))")
            let replayed = try await Self.redeem(
                client, code: try await Self.code(client, jar), fields: Self.asserted(good))
            #expect(replayed.status == 401)
            // The same secret with Basic.
            var headers: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
            headers[.authorization] = HTTPBasic.header(id: "keyed", secret: secret).value
            let basic = try await client.send(
                .post, "/auth/token", headers: headers,
                body: Array(
                    FormEncoding.encode([
                        ("grant_type", "authorization_code"), ("code", try await Self.code(client, jar)),
                        ("redirect_uri", OP.web),
                    ]).utf8))
            #expect(basic.status == 200)
        }
        // An app with a secret of the older kind (random; the store holds only its hash).
        let old = try await InProcessBroker()
        try await OP.register(old, firstParty: true)
        try await old.test { client in
            _ = try await client.register("kay@example.com", OP.password)
            let refused = try await Self.redeem(
                client, code: "x",
                fields: Self.asserted(
                    hs256(OP.secret) {
                        $0["iss"] = "web"; $0["sub"] = "web"
                    }))
            #expect(refused.status == 401)
            #expect(refused["error_description"]?.stringValue?.contains("issued before client_secret_jwt") == true)
        }
    }

    /// What an app may register as its keys, from `broker client add --jwks-file` or RFC 7591 `jwks`.
    @Test func registeredKeysArePublicUsableAndSmall() throws {
        let key = try AsymmetricKey.generate(.ecP256)
        let publicSet = JSONValue.object([
            "keys": .array([try JSONValue.parse(JSONEncoder().encode(key.jwk())) ?? .null])
        ])
        #expect(AppRules.jwksProblem(publicSet.serialized()) == nil)
        let privateSet = JSONValue.object([
            "keys": .array([try JSONValue.parse(JSONEncoder().encode(key.jwk(includePrivate: true))) ?? .null])
        ])
        #expect(AppRules.jwksProblem(privateSet.serialized())?.contains("private key") == true)
        #expect(AppRules.jwksProblem(#"{"keys": [{"kty": "oct", "k": "AAAA"}]}"#)?.contains("no key") == true)
        #expect(AppRules.jwksProblem("[]")?.contains("JWK Set") == true)
        #expect(AppRules.jwksURIProblem("http://keys.example/jwks") != nil, "https only, off loopback")
        #expect(AppRules.jwksURIProblem("https://keys.example/jwks#x") != nil)
        #expect(AppRules.jwksURIProblem("https://keys.example/jwks") == nil)
    }
}

extension JWK {
    fileprivate func withKid(_ kid: String) -> JWK {
        var copy = self
        copy.kid = kid
        return copy
    }
}
