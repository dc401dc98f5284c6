import Apple
import AppleEmulator
import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerTesting
import Foundation
import GitHub
import GitHubEmulator
import Logging
import ProviderEmulators
import ProviderSchemaSupport
import ProviderSupport
import Testing

/// GitHub's and Apple's answers as their documentation shows them (Tests/ProviderTests/Fixtures, with the
/// pages they restate): the modules read the documented answers, send the documented requests, and the
/// emulators answer in the documented shapes — each field named here.
@Suite("GitHub and Apple: the wire shapes of their documentation")
struct WireShapeTests {
    static func fixture(_ name: String) throws -> JSONValue {
        let url = TestPaths.repositoryRoot.appendingPathComponent("Tests/ProviderTests/Fixtures/\(name)")
        return try #require(JSONValue.parse(Array(try Data(contentsOf: url))), Comment(rawValue: name))
    }

    /// The JSON kind of a value, for comparing shapes.
    static func kind(_ value: JSONValue?) -> String {
        switch value {
        case nil: "absent"
        case .null?: "null"
        case .bool?: "boolean"
        case .int?, .double?: "number"
        case .string?: "string"
        case .array?: "array"
        case .object?: "object"
        }
    }

    static func form(_ request: HTTPClientRequest) -> [String: String] {
        var fields: [String: String] = [:]
        for (name, value) in FormEncoding.decode(String(decoding: request.body ?? [], as: UTF8.self)) ?? [] {
            fields[name] = value
        }
        return fields
    }

    static func context(_ transport: ScriptedTransport, clock: ManualClock) -> ProviderContext {
        ProviderContext(
            http: { transport }, clock: clock,
            directory: IssuerDirectory(http: { transport }, clock: clock, logger: Logger(label: "test")),
            readSecretFile: { path throws(ProviderError) in
                guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                    throw .invalidResponse("cannot read \(path)")
                }
                return text
            })
    }

    static let pending = PendingSignIn(
        state: "st-1", nonce: "n-1", codeVerifier: String(repeating: "v", count: 43),
        callbackURL: "https://broker.example/auth/github/callback")

    // MARK: GitHub

    @Test func gitHubModuleSendsTheDocumentedRequestsAndReadsTheDocumentedAnswers() async throws {
        let transport = ScriptedTransport()
        let clock = ManualClock()
        let provider = try GitHubProvider(
            ProviderSection(id: "github", values: ["client_id": "Iv1.abc", "client_secret": "s3cret"]),
            context: Self.context(transport, clock: clock))
        // The authorize request: GET https://github.com/login/oauth/authorize with these parameters.
        let url = try await provider.authorizationURL(for: Self.pending)
        #expect(url.hasPrefix("https://github.com/login/oauth/authorize?"))
        let query = Dictionary(
            uniqueKeysWithValues: FormEncoding.decode(String(url.split(separator: "?")[1]))?.map { ($0.0, $0.1) } ?? [])
        for name in ["client_id", "redirect_uri", "scope", "state", "code_challenge", "code_challenge_method"] {
            #expect(query[name] != nil, "authorize: \(name)")
        }
        #expect(query["scope"] == "read:user user:email" && query["code_challenge_method"] == "S256")

        transport.on("POST", "https://github.com/login/oauth/access_token") { _ in
            ScriptedTransport.json(try Self.fixture("github/token.json"))
        }
        transport.on("GET", "https://api.github.com/user") { _ in
            ScriptedTransport.json(try Self.fixture("github/user.json"))
        }
        transport.on("GET", "https://api.github.com/user/emails") { _ in
            ScriptedTransport.json(try Self.fixture("github/emails.json"))
        }
        let identity = try await provider.complete(callback: ["code": "c0de", "state": "st-1"], pending: Self.pending)
        // /user's `id` (a number) is the subject; `name` the name; /user/emails' primary verified `email` the address.
        #expect(identity.subject == "1" && identity.name == "monalisa octocat")
        #expect(identity.email == "octocat@github.com" && identity.emailVerified)

        let exchange = try #require(transport.sent.first { $0.method == "POST" })
        let fields = Self.form(exchange)
        for name in ["client_id", "client_secret", "code", "redirect_uri", "code_verifier"] {
            #expect(fields[name] != nil, "access_token request: \(name)")
        }
        #expect(exchange.headers.contains { $0.name == "Accept" && $0.value == "application/json" })
        for api in transport.sent.filter({ $0.method == "GET" }) {
            // The `access_token` of github/token.json, as the REST API takes it.
            #expect(
                api.headers.contains {
                    $0 == (name: "Authorization", value: "Bearer gho_16C7e42F292c6912E7710c838347Ae178B4a")
                })
            #expect(api.headers.contains { $0.name == "User-Agent" && !$0.value.isEmpty }, "GitHub refuses without one")
            #expect(api.headers.contains { $0 == (name: "X-GitHub-Api-Version", value: "2022-11-28") })
            #expect(api.headers.contains { $0 == (name: "Accept", value: "application/vnd.github+json") })
        }
    }

    /// A renamed login is the same user: the subject is the numeric id; without a name, the login is shown.
    @Test func gitHubKeysOnTheIdNotTheLogin() async throws {
        let transport = ScriptedTransport()
        let provider = try GitHubProvider(
            ProviderSection(id: "github", values: ["client_id": "Iv1.abc", "client_secret": "s3cret"]),
            context: Self.context(transport, clock: ManualClock()))
        transport.on("POST", "https://github.com/login/oauth/access_token") { _ in
            ScriptedTransport.json(try Self.fixture("github/token.json"))
        }
        let user = try #require(try Self.fixture("github/user.json").objectValue)
        var renamed = user
        renamed["login"] = "octocat-renamed"
        renamed["name"] = .null
        let before = JSONValue.object(user)
        let after = JSONValue.object(renamed)
        transport.on(
            "GET", "https://api.github.com/user", { _ in ScriptedTransport.json(before) },
            { _ in ScriptedTransport.json(after) })
        // No verified primary address: none is kept.
        transport.onJSON(
            "GET", "https://api.github.com/user/emails",
            [["email": "octocat@github.com", "primary": true, "verified": false, "visibility": "private"]])
        let first = try await provider.complete(callback: ["code": "a"], pending: Self.pending)
        let second = try await provider.complete(callback: ["code": "b"], pending: Self.pending)
        #expect(first.subject == "1" && second.subject == "1")
        #expect(second.name == "octocat-renamed")
        #expect(first.email == nil && !first.emailVerified)
        // An id that is not a number is refused (a login in its place would let names change hands).
        var stringID = user
        stringID["id"] = "octocat"
        transport.onJSON("GET", "https://api.github.com/user", .object(stringID))
        await #expect(throws: ProviderError.invalidResponse("GitHub's /user has no numeric id")) {
            try await provider.complete(callback: ["code": "c"], pending: Self.pending)
        }
    }

    @Test func gitHubAnswersARefusedExchangeWith200() async throws {
        let transport = ScriptedTransport()
        let provider = try GitHubProvider(
            ProviderSection(
                id: "github",
                values: ["client_id": "Iv1.abc", "client_secret": "s3cret", "base_url": "https://ghe.example"]),
            context: Self.context(transport, clock: ManualClock()))
        // Enterprise Server: the same paths under base_url, the API under /api/v3.
        #expect(
            try await provider.authorizationURL(for: Self.pending).hasPrefix(
                "https://ghe.example/login/oauth/authorize?"))
        transport.on("POST", "https://ghe.example/login/oauth/access_token") { _ in
            ScriptedTransport.json(try Self.fixture("github/token-error.json"))
        }
        do {
            _ = try await provider.complete(callback: ["code": "stale"], pending: Self.pending)
            Issue.record("a 200 with error was taken for tokens")
        } catch {
            #expect(error.description.contains("bad_verification_code"), "\(error)")
        }
        #expect(transport.count("GET", "https://ghe.example/api/v3/user") == 0, "nothing asked after a refusal")

        // A token the REST API refuses: its message is passed on, and no Accept header is sent twice.
        transport.on("POST", "https://ghe.example/login/oauth/access_token") { _ in
            ScriptedTransport.json(try Self.fixture("github/token.json"))
        }
        transport.onJSON("GET", "https://ghe.example/api/v3/user", status: 401, ["message": "Bad credentials"])
        do {
            _ = try await provider.complete(callback: ["code": "c"], pending: Self.pending)
            Issue.record("a refused /user was taken for a user")
        } catch {
            #expect(error.description.contains("HTTP 401 Bad credentials"), "\(error)")
        }
        let asked = try #require(transport.sent.last)
        #expect(asked.headers.filter { $0.name.lowercased() == "accept" }.count == 1)
    }

    @Test func gitHubEmulatorAnswersInTheDocumentedShapes() throws {
        let account = try #require(GitHubEmulator.dialect.accounts.first)
        let user = GitHubEmulator.user(account, base: "http://127.0.0.1:1/github")
        let documented = try Self.fixture("github/user.json")
        for field in ["login", "id", "node_id", "avatar_url", "html_url", "type", "site_admin", "name", "email"] {
            #expect(Self.kind(user[field]) == Self.kind(documented[field]) || user[field] == .null, "/user \(field)")
        }
        #expect(Self.kind(user["id"]) == "number", "the id is a number, as documented")
        let emails = GitHubEmulator.emails(account)
        let documentedEmail = try #require(try Self.fixture("github/emails.json").arrayValue?.first)
        for entry in emails.arrayValue ?? [] {
            for field in ["email", "primary", "verified"] {
                #expect(Self.kind(entry[field]) == Self.kind(documentedEmail[field]), "/user/emails \(field)")
            }
            #expect(["string", "null"].contains(Self.kind(entry["visibility"])), "/user/emails visibility")
        }
        let answer = try #require(GitHubEmulator.dialect.tokenAnswer?("gho_x"))
        let token = try Self.fixture("github/token.json")
        #expect(Set(answer.objectValue?.keys.map { $0 } ?? []) == Set(token.objectValue?.keys.map { $0 } ?? []))
        for field in ["access_token", "scope", "token_type"] {
            #expect(Self.kind(answer[field]) == Self.kind(token[field]), "token \(field)")
        }
        guard case .json(200, let refusal) = GitHubEmulator.dialect.error(400, "invalid_request", "") else {
            Issue.record("GitHub's refusals are 200 with a body")
            return
        }
        let error = try Self.fixture("github/token-error.json")
        for field in ["error", "error_description", "error_uri"] {
            #expect(refusal[field] == error[field], "token error \(field)")
        }
    }

    // MARK: Apple

    static var emulatedKeyFile: String {
        TestPaths.repositoryRoot.appendingPathComponent("Config/emulated-apple.p8").path
    }

    @Test func appleModuleSendsTheDocumentedRequestsAndReadsTheDocumentedAnswers() async throws {
        let transport = ScriptedTransport()
        let clock = ManualClock()
        let signer = try JWTSigner(key: try AsymmetricKey.generate(.rsa(bits: 2048)), kid: "apple-1")
        var jwk = try signer.key.jwk()
        jwk.kid = "apple-1"
        let jwks = try #require(JSONValue.parse(Array(try JSONEncoder().encode(JWKSet(keys: [jwk])))))
        transport.onJSON("GET", "https://appleid.apple.com/auth/keys", jwks)
        var claims = try #require(try Self.fixture("apple/id-token-claims.json").objectValue)
        claims["aud"] = "com.example.signin"
        claims["nonce"] = .string(Self.pending.nonce)
        claims["iat"] = .int(clock.seconds())
        claims["exp"] = .int(clock.seconds() + 600)
        let idToken = try signer.sign(claims: claims)
        var tokens = try #require(try Self.fixture("apple/token.json").objectValue)
        tokens["id_token"] = .string(idToken)
        let answer = JSONValue.object(tokens)
        transport.on("POST", "https://appleid.apple.com/auth/token") { _ in ScriptedTransport.json(answer) }

        let provider = try AppleProvider(
            ProviderSection(
                id: "apple",
                values: [
                    "client_id": "com.example.signin", "team_id": "DEF123GHIJ", "key_id": "ABC123DEFG",
                    "private_key_file": .string(Self.emulatedKeyFile),
                ]),
            context: Self.context(transport, clock: clock))
        #expect(provider.callbackMethod == .formPost)
        let url = try await provider.authorizationURL(for: Self.pending)
        #expect(url.hasPrefix("https://appleid.apple.com/auth/authorize?"))
        let query = Dictionary(
            uniqueKeysWithValues: FormEncoding.decode(String(url.split(separator: "?")[1]))?.map { ($0.0, $0.1) } ?? [])
        #expect(query["response_type"] == "code" && query["response_mode"] == "form_post")
        #expect(query["scope"] == "name email" && query["nonce"] == Self.pending.nonce)
        for name in ["client_id", "redirect_uri", "state"] { #expect(query[name] != nil, "authorize: \(name)") }

        // The form post's fields (code, state, user; the id_token in it is not used: the exchange's is).
        var posted: [String: String] = [:]
        for (key, value) in try #require(try Self.fixture("apple/form-post.json").objectValue) {
            posted[key] = value.stringValue
        }
        let identity = try await provider.complete(callback: posted, pending: Self.pending)
        #expect(identity.subject == "000544.5e201aec537347aeb79d23cbc345170a.1321")
        #expect(
            identity.email == "k3v9q2m7xz@privaterelay.appleid.com" && identity.emailVerified, "a relay address is real"
        )
        #expect(identity.name == "John Appleseed", "the first sign-in's user member")
        #expect(identity.details == ["is_private_email": "true", "real_user_status": "likely_real"])
        // Without `user` (every later sign-in) there is no name, and nothing else changes.
        posted["user"] = nil
        let later = try await provider.complete(callback: posted, pending: Self.pending)
        #expect(later.name == nil && later.subject == identity.subject)

        // The token request, and its client secret as Apple documents it.
        let exchange = try #require(transport.sent.first { $0.method == "POST" })
        let fields = Self.form(exchange)
        for name in ["client_id", "client_secret", "code", "grant_type", "redirect_uri"] {
            #expect(fields[name] != nil, "token request: \(name)")
        }
        #expect(fields["grant_type"] == "authorization_code")
        let secret = try #require(fields["client_secret"])
        let documented = try Self.fixture("apple/client-secret.json")
        let parts = secret.split(separator: ".")
        let header = try #require(Base64URL.decode(parts[0]).flatMap { JSONValue.parse($0) })
        let body = try #require(Base64URL.decode(parts[1]).flatMap { JSONValue.parse($0) })
        for field in ["alg", "kid"] { #expect(Self.kind(header[field]) == Self.kind(documented["header"]?[field])) }
        #expect(header["alg"] == "ES256" && header["kid"] == "ABC123DEFG")
        for field in ["iss", "iat", "exp", "aud", "sub"] {
            #expect(Self.kind(body[field]) == Self.kind(documented["claims"]?[field]), "client secret \(field)")
        }
        #expect(body["iss"] == "DEF123GHIJ" && body["sub"] == "com.example.signin")
        #expect(body["aud"] == documented["claims"]?["aud"])
        let publicKey = try AsymmetricKey(
            pem: try AsymmetricKey(pem: String(contentsOfFile: Self.emulatedKeyFile, encoding: .utf8)).publicKeyPEM())
        var keys = JWTKeySet()
        try keys.add(publicKey, kid: "ABC123DEFG")
        _ = try JWTVerifier(keys: keys, options: .init(issuer: "DEF123GHIJ", audience: "https://appleid.apple.com"))
            .verify(secret, now: clock.seconds())
    }

    @Test func appleRefusesWhatAppleWouldNot() async throws {
        let clock = ManualClock()
        func make(_ values: [String: JSONValue]) throws(ProviderError) -> AppleProvider {
            try AppleProvider(
                ProviderSection(id: "apple", values: values), context: Self.context(ScriptedTransport(), clock: clock))
        }
        let base: [String: JSONValue] = ["client_id": "c", "team_id": "DEF123GHIJ", "key_id": "ABC123DEFG"]
        // An RSA key is not an Apple key; a missing file says so.
        let rsa = try AsymmetricKey.generate(.rsa(bits: 2048)).privateKeyPEM()
        #expect(throws: ProviderError.self) { try make(base.merging(["private_key": .string(rsa)]) { $1 }) }
        #expect(throws: ProviderError.self) { try make(base.merging(["private_key_file": "/nonexistent.p8"]) { $1 }) }
        // A cancelled sheet is a refusal, passed on as Apple names it.
        let provider = try make(base.merging(["private_key_file": .string(Self.emulatedKeyFile)]) { $1 })
        await #expect(throws: ProviderError.denied(code: "user_cancelled_authorize", description: "")) {
            try await provider.complete(callback: ["error": "user_cancelled_authorize"], pending: Self.pending)
        }
        // A user member that is not JSON, or is too long, gives no name and breaks nothing.
        #expect(AppleProvider.name(fromUser: "{not json") == nil)
        #expect(AppleProvider.name(fromUser: String(repeating: "x", count: 5000)) == nil)
        #expect(AppleProvider.name(fromUser: #"{"name":{"firstName":"  Ada  "}}"#) == "Ada")
    }

    @Test func appleEmulatorAnswersInTheDocumentedShapes() throws {
        let clock = ManualClock()
        let state = try AppleEmulator.State()
        let redirect = "http://127.0.0.1:1/auth/apple/callback"
        let form: [String: String] = [
            "client_id": AppleEmulator.clientID, "redirect_uri": redirect, "response_type": "code",
            "response_mode": "form_post", "scope": "name email", "state": "st", "nonce": "n", "decision": "allow",
            "account": "relay",
        ]
        guard case .page(200, let page) = try AppleEmulator.consent(form, state: state, clock: clock) else {
            Issue.record("no form_post page")
            return
        }
        let documentedPost = try Self.fixture("apple/form-post.json")
        for field in ["code", "state", "user"] {
            #expect(page.contains("name=\"\(field)\""), "form post \(field)")
        }
        #expect(documentedPost["user"] != nil)
        let code = try #require(
            page.split(separator: "name=\"code\" value=\"").dropFirst().first?.split(separator: "\"").first)
        // The client secret as Apple checks it, signed with the emulated key.
        let key = try AsymmetricKey(pem: String(contentsOfFile: Self.emulatedKeyFile, encoding: .utf8))
        let now = clock.seconds()
        let secret = try JWTSigner(key: key, kid: AppleEmulator.keyID).sign(claims: [
            "iss": .string(AppleEmulator.teamID), "iat": .int(now), "exp": .int(now + 300),
            "aud": "https://appleid.apple.com", "sub": .string(AppleEmulator.clientID),
        ])
        var request: [String: String] = [
            "client_id": AppleEmulator.clientID, "client_secret": secret, "code": String(code),
            "grant_type": "authorization_code", "redirect_uri": redirect,
        ]
        // A secret under another kid, or signed by another key, is invalid_client.
        request["client_secret"] = try JWTSigner(key: try AsymmetricKey.generate(.ecP256), kid: AppleEmulator.keyID)
            .sign(claims: [
                "iss": .string(AppleEmulator.teamID), "iat": .int(now), "exp": .int(now + 300),
                "aud": "https://appleid.apple.com", "sub": .string(AppleEmulator.clientID),
            ])
        guard case .json(400, let refused) = try AppleEmulator.token(request, state: state, issuer: "x", clock: clock)
        else { Issue.record("a forged secret was accepted"); return }
        #expect(refused["error"] == "invalid_client")
        request["client_secret"] = secret
        guard case .json(200, let answer) = try AppleEmulator.token(request, state: state, issuer: "x", clock: clock)
        else { Issue.record("the exchange failed"); return }
        let documented = try Self.fixture("apple/token.json")
        for field in ["access_token", "expires_in", "id_token", "refresh_token", "token_type"] {
            #expect(Self.kind(answer[field]) == Self.kind(documented[field]), "token \(field)")
        }
        #expect(answer["token_type"] == documented["token_type"])
        let idToken = try #require(answer["id_token"]?.stringValue)
        let claims = try #require(
            Base64URL.decode(idToken.split(separator: ".")[1]).flatMap { JSONValue.parse($0) })
        let documentedClaims = try Self.fixture("apple/id-token-claims.json")
        for field in [
            "iss", "aud", "exp", "iat", "sub", "nonce", "nonce_supported", "at_hash", "email", "email_verified",
            "is_private_email", "real_user_status", "auth_time",
        ] {
            #expect(Self.kind(claims[field]) == Self.kind(documentedClaims[field]), "id token \(field)")
        }
    }
}
