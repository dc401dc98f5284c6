import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

@Suite("broker client: CI clients in the store")
struct ClientAdminTests {
    @Test func addListRemoveAndOnlyAHashIsStored() async throws {
        let fixture = try await MintFixture.start()
        let data = fixture.server.dataDirectory

        let added = try await CLI.run(["client", "add", "deploy", "--scope", "deploy", "--data-dir", data])
        #expect(added.status == 0, "\(added.stderr)")
        let lines = added.stdout.split(separator: "\n")
        #expect(lines.count == 2 && lines[0] == "client_id: deploy" && lines[1].hasPrefix("client_secret: "))
        let secret = String(lines[1].dropFirst("client_secret: ".count))
        #expect(secret.utf8.count == 43 && Base64URL.decode(secret)?.count == 32, "256 random bits, base64url")
        #expect(added.stderr.contains("shown only this once"))

        // The store holds a keyed hash, never the secret; the hash key is sealed in the store under the master
        // key, which is 0600 in the data directory's keys folder.
        let stored = try await SQLiteStore(path: data + "/broker.sqlite3").client(name: "deploy")?.secretHash
        #expect(stored?.hasPrefix("hmac-sha256$") == true)
        #expect(stored?.contains(secret) == false)
        let keyFile = data + "/keys/master.key"
        let mode = try FileManager.default.attributesOfItem(atPath: keyFile)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        // SQLite-specific: the secret is nowhere in the database files (main file and WAL), in any column.
        for file in ["broker.sqlite3", "broker.sqlite3-wal"] {
            let bytes = (try? Data(contentsOf: URL(fileURLWithPath: data + "/" + file))) ?? Data()
            #expect(bytes.range(of: Data(secret.utf8)) == nil, "\(file)")
        }

        let duplicate = try await CLI.run(["client", "add", "deploy", "--data-dir", data])
        #expect(duplicate.status == 1 && duplicate.stderr.contains("already exists"))
        #expect(duplicate.stdout.isEmpty)

        try await fixture.addTrusting("gh")
        let list = try await CLI.run(["client", "list", "--json", "--data-dir", data])
        #expect(list.status == 0)
        let clients = JSONValue.parse(Array(list.stdout.utf8))?["clients"]?.arrayValue ?? []
        #expect(clients.compactMap { $0["client_id"]?.stringValue } == ["deploy", "gh"])
        #expect(clients.last?["trust"]?["subject"]?.stringValue == "repo:acme/api:ref:refs/heads/*")
        #expect(clients.last?["trust"]?["audience"]?.stringValue == "broker")
        #expect(!list.stdout.contains(secret) && !list.stdout.contains("hmac"))

        let removed = try await CLI.run(["client", "remove", "deploy", "--data-dir", data])
        #expect(removed.status == 0)
        let again = try await CLI.run(["client", "remove", "deploy", "--data-dir", data])
        #expect(again.status == 1 && again.stderr.contains("no client named deploy"))
        let mint = try await fixture.mint(["--client-id", "deploy", "--client-secret-stdin"], stdin: secret)
        #expect(mint.status == 4 && mint.stdout.isEmpty, "a removed client mints no more")
    }

    @Test func badArgumentsAreUsageErrors() async throws {
        let directory = try BrokerProcess.temporaryDirectory()
        let data = directory.appendingPathComponent("data").path
        let cases: [([String], String)] = [
            (["client", "add", "bad name"], "must be 1–64"),
            (["client", "add", "-x"], "Missing expected argument"),
            (["client", "add", "ok", "--trust-subject", "repo:*"], "need --trust-issuer"),
            (["client", "add", "ok", "--trust-issuer", "https://issuer.example"], "needs --trust-subject"),
            (["client", "add", "ok", "--trust-issuer", "http://issuer.example", "--trust-subject", "x"], "https"),
            (["client", "add", "ok", "--trust-issuer", "https://u@issuer.example", "--trust-subject", "x"], "user"),
            (["client", "add", "ok", "--trust-issuer", "https://issuer.example", "--trust-subject", "*"], "every job"),
            (["client", "add", "ok", "--scope", "two words"], "scope token"),
            // RT3-10: the CLI's own client id, in any case, as an app or as a CI client.
            (["client", "add", "broker-cli", "--redirect-uri", "https://evil.example/cb"], "CLI's own client id"),
            (["client", "add", "Broker-CLI"], "CLI's own client id"),
        ]
        for (arguments, message) in cases {
            let result = try await CLI.run(arguments + ["--data-dir", data])
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
            #expect(result.stdout.isEmpty)
        }
        #expect(!FileManager.default.fileExists(atPath: data + "/broker.sqlite3"), "nothing was written")

        // RT3-4: an app named after the APIs' audience would be given tokens every API takes.
        let audience = try await CLI.run(
            ["client", "add", "broker", "--redirect-uri", "https://app.example/cb", "--data-dir", data])
        #expect(audience.status == 1 && audience.stderr.contains("server.audience"), "\(audience.stderr)")
        #expect(try await CLI.run(["client", "list", "--json", "--data-dir", data]).stdout.contains("broker") == false)

        let config = directory.appendingPathComponent("bad.json")
        try Data(#"{"server": {"mint_max_ttl": "long"}}"#.utf8).write(to: config)
        let badConfig = try await CLI.run(["client", "list", "--config", config.path, "--data-dir", data])
        #expect(badConfig.status == 1 && badConfig.stderr.contains("mint_max_ttl"), "\(badConfig.stderr)")
    }
}

@Suite("client_credentials")
struct ClientCredentialsTests {
    @Test func mintsWithBasicPostStdinAndEnvironment() async throws {
        let fixture = try await MintFixture.start(mintMaxTTL: 300)
        let secret = try await fixture.addClient("deploy", ["--scope", "deploy", "--scope", "read"])

        // client_secret_basic from stdin (the CLI's way), checked by joserfc and PyJWT.
        let minted = try await fixture.mint(["--client-id", "deploy", "--client-secret-stdin"], stdin: secret)
        #expect(minted.status == 0, "\(minted.stderr)")
        let token = minted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let verified = try await Interop.run(["verify_broker_token.py", fixture.server.url, token])
        #expect(verified.status == 0, "\(verified.stderr)")
        let claims = JSONValue.parse(Array(verified.stdout.utf8))
        #expect(claims?["sub"]?.stringValue == "client:deploy")
        #expect(claims?["client_id"]?.stringValue == "deploy")
        #expect(claims?["scope"]?.stringValue == "deploy read")
        #expect(claims?["federated"] == nil)
        #expect(claims?["cnf"] == nil, "a CI token is not bound to the minting profile's DPoP key")
        #expect(try await fixture.server.me(token).status == 200, "it works as a Bearer token")
        #expect((claims?["exp"]?.intValue ?? 0) - (claims?["iat"]?.intValue ?? 0) == 300, "600 capped by 300")

        // The secret from the environment; --ttl under the cap; a scope subset; JSON output.
        let fromEnvironment = try await fixture.mint(
            ["--client-id", "deploy", "--ttl", "60", "--scope", "read", "--scope", "admin", "--format", "json"],
            environment: ["BROKER_CLIENT_SECRET": secret]
        )
        #expect(fromEnvironment.status == 0, "\(fromEnvironment.stderr)")
        let document = JSONValue.parse(Array(fromEnvironment.stdout.utf8))
        #expect(document?["expires_in"]?.intValue == 60)
        #expect(document?["scope"]?.stringValue == "read", "requested ∩ allowed")
        #expect(document?["refresh_token"] == nil, "no refresh token for CI tokens")
        #expect(document?["user_id"]?.stringValue == "client:deploy")

        // client_secret_post, straight at the endpoint.
        let post = try await fixture.server.form(
            "/auth/token",
            [("grant_type", "client_credentials"), ("client_id", "deploy"), ("client_secret", secret), ("ttl", "9999")]
        )
        #expect(post.status == 200 && post["refresh_token"] == nil)
        #expect(post["expires_in"]?.intValue == 300)
        #expect(post.header("Cache-Control") == "no-store")

        // The token works at /auth/me while the client exists.
        let access = try #require(post["access_token"]?.stringValue)
        let me = try await fixture.server.me(access)
        #expect(me.status == 200 && me["user_id"]?.stringValue == "client:deploy")
        _ = try await CLI.run(["client", "remove", "deploy", "--data-dir", fixture.server.dataDirectory])
        let after = try await fixture.server.me(access)
        #expect(after.status == 401 && after.error == "invalid_token")
    }

    @Test func refusalsExitFourWithTheReasonAndNothingOnStdout() async throws {
        let fixture = try await MintFixture.start()
        let secret = try await fixture.addClient("deploy", ["--scope", "deploy"])

        let wrong = try await fixture.mint(["--client-id", "deploy", "--client-secret-stdin"], stdin: secret + "x")
        #expect(wrong.status == 4 && wrong.stdout.isEmpty)
        #expect(wrong.stderr.contains("the client id or secret is not right"), "\(wrong.stderr)")

        let unknown = try await fixture.mint(["--client-id", "nobody", "--client-secret-stdin"], stdin: secret)
        #expect(unknown.status == 4 && unknown.stdout.isEmpty)
        #expect(unknown.stderr.contains("the client id or secret is not right"), "same answer as a wrong secret")

        let scope = try await fixture.mint(
            ["--client-id", "deploy", "--client-secret-stdin", "--scope", "admin"], stdin: secret)
        #expect(scope.status == 4 && scope.stdout.isEmpty && scope.stderr.contains("may not have"))

        let noSecret = try await fixture.mint(["--client-id", "deploy"])
        #expect(noSecret.status == 64 && noSecret.stderr.contains("BROKER_CLIENT_SECRET"))

        let mixed = try await fixture.mint(["--client-id", "deploy", "--signing-key", "k.pem"])
        #expect(mixed.status == 64)
        let neither = try await CLI.run(["mint"])
        #expect(neither.status == 64 && neither.stderr.contains("--client-id"))

        // Unreachable broker: a failure (1), not an authentication problem.
        let offline = try await CLI.run(
            ["mint", "--broker", "http://127.0.0.1:1", "--client-id", "deploy", "--client-secret-stdin"], stdin: secret)
        #expect(offline.status == 1 && offline.stdout.isEmpty)
    }

    @Test func malformedClientAuthentication() async throws {
        let fixture = try await MintFixture.start()
        let secret = try await fixture.addClient("deploy")
        func basic(_ text: String) -> [(name: String, value: String)] {
            [(name: "Authorization", value: "Basic " + Data(text.utf8).base64EncodedString())]
        }
        func token(_ fields: [(String, String)], headers: [(name: String, value: String)] = []) async throws
            -> BrokerProcess.Reply
        {
            try await fixture.server.send(
                HTTPClientRequest.form(url: fixture.server.url + "/auth/token", fields: fields, headers: headers))
        }
        let grant = [("grant_type", "client_credentials")]

        let good = try await token(grant, headers: basic("deploy:\(secret)"))
        #expect(good.status == 200)
        let both = try await token(grant + [("client_secret", secret)], headers: basic("deploy:\(secret)"))
        #expect(both.status == 400 && both.error == "invalid_request", "two authentication methods")
        let garbage = try await token(grant, headers: [(name: "Authorization", value: "Basic !!!")])
        #expect(garbage.status == 401 && garbage.error == "invalid_client")
        #expect(garbage.header("WWW-Authenticate")?.hasPrefix("Basic") == true)
        let noColon = try await token(grant, headers: basic("deploy"))
        #expect(noColon.status == 401 && noColon.error == "invalid_client")
        let bearer = try await token(grant, headers: [(name: "Authorization", value: "Bearer x")])
        #expect(bearer.status == 401 && bearer.error == "invalid_client")
        let none = try await token(grant)
        #expect(none.status == 401 && none.error == "invalid_client")
        let badTTL = try await token(grant + [("ttl", "soon")], headers: basic("deploy:\(secret)"))
        #expect(badTTL.status == 400 && badTTL.error == "invalid_request")
        let json = try await fixture.server.post(
            "/auth/token",
            json: [
                "grant_type": "client_credentials", "client_id": "deploy", "client_secret": .string(secret), "ttl": 30,
            ])
        #expect(json.status == 200 && json["expires_in"]?.intValue == 30, "JSON bodies work too")
    }
}

@Suite("token exchange (RFC 8693) with a loopback CI issuer")
struct TokenExchangeTests {
    @Test(
        "a token-exchange-only client has no secret, and client_credentials is refused for it",
        .bug(id: 18, "finding 3: a --trust-issuer client got a working secret"))
    func trustClientsHaveNoSecretUnlessAsked() async throws {
        let fixture = try await MintFixture.start()
        try await fixture.addTrusting("gh")
        // Whatever secret is presented, a client without one cannot use client_credentials.
        for guess in ["", "x", String(repeating: "A", count: 43)] {
            let minted = try await fixture.mint(["--client-id", "gh", "--client-secret-stdin"], stdin: guess)
            #expect(minted.status == 4 || minted.status == 64, "\(minted.stderr)")
            #expect(minted.stdout.isEmpty)
        }
        let exchanged = try await fixture.exchange("gh", token: try await fixture.issuer.token())
        #expect(exchanged.status == 0, "exchange still works: \(exchanged.stderr)")
        // Asked for explicitly, the secret is made, shown once, and mints.
        let secret = try await fixture.addClient(
            "gh-both",
            ["--trust-issuer", fixture.issuer.issuer("gha"), "--trust-subject", "repo:*", "--with-secret"])
        let both = try await fixture.mint(["--client-id", "gh-both", "--client-secret-stdin"], stdin: secret)
        #expect(both.status == 0, "\(both.stderr)")
        let misuse = try await CLI.run(
            ["client", "add", "plain", "--with-secret", "--data-dir", fixture.server.dataDirectory])
        #expect(misuse.status == 64 && misuse.stderr.contains("--with-secret"))
    }

    @Test func acceptedFromFileAndEnvironmentOnceEach() async throws {
        let fixture = try await MintFixture.start()
        try await fixture.addTrusting("gh")

        let oidc = try await fixture.issuer.token()
        let minted = try await fixture.exchange("gh", token: oidc, ["--format", "json"])
        #expect(minted.status == 0, "\(minted.stderr)")
        let document = JSONValue.parse(Array(minted.stdout.utf8))
        #expect(document?["issued_token_type"]?.stringValue == "urn:ietf:params:oauth:token-type:access_token")
        let access = try #require(document?["access_token"]?.stringValue)
        let verified = try await Interop.run(["verify_broker_token.py", fixture.server.url, access])
        #expect(verified.status == 0, "\(verified.stderr)")
        let claims = JSONValue.parse(Array(verified.stdout.utf8))
        #expect(claims?["sub"]?.stringValue == "client:gh")
        #expect(claims?["federated"]?["iss"]?.stringValue == fixture.issuer.issuer("gha"))
        #expect(claims?["federated"]?["sub"]?.stringValue == "repo:acme/api:ref:refs/heads/main")
        #expect(claims?["scope"]?.stringValue == "deploy")

        // The same token twice: its jti is remembered.
        let replay = try await fixture.exchange("gh", token: oidc)
        #expect(replay.status == 4 && replay.stdout.isEmpty && replay.stderr.contains("already been exchanged"))

        // From an environment variable (GitLab's id_tokens), ES256 this time.
        let es256 = try await fixture.issuer.token(
            "gha", [("alg", "ES256"), ("sub", "repo:acme/api:ref:refs/heads/release")])
        let fromEnvironment = try await CLI.run(
            ["mint", "--broker", fixture.server.url, "--client-id", "gh", "--subject-token-env", "CI_JOB_JWT"],
            environment: ["CI_JOB_JWT": es256 + "\n"]
        )
        #expect(fromEnvironment.status == 0, "\(fromEnvironment.stderr)")

        let empty = try await CLI.run(
            ["mint", "--broker", fixture.server.url, "--client-id", "gh", "--subject-token-env", "UNSET_VARIABLE"])
        #expect(empty.status == 1 && empty.stderr.contains("UNSET_VARIABLE"))
        let missing = try await fixture.mint(["--client-id", "gh", "--subject-token-file", "/nonexistent/oidc.jwt"])
        #expect(missing.status == 1 && missing.stderr.contains("/nonexistent/oidc.jwt"))
    }

    @Test func everyForgeryAndMismatchIsRefusedWithItsReason() async throws {
        let fixture = try await MintFixture.start()
        try await fixture.addTrusting("gh", ["--trust-max-age", "300"])
        try await fixture.addTrusting("broken", tenant: "broken")
        try await fixture.addTrusting("liar", tenant: "liar")
        try await fixture.addClient("plain")

        let cases: [(String, [(String, String)], String)] = [
            ("another repository", [("sub", "repo:acme/other:ref:refs/heads/main")], "does not match"),
            ("a prefix of the pattern only", [("sub", "repo:acme/api:ref:refs/heads")], "does not match"),
            ("wrong audience", [("aud", "https://github.com/acme")], "audience mismatch"),
            ("expired", [("iat", "-400"), ("exp", "-100")], "expired"),
            ("not yet valid", [("nbf", "300")], "not yet valid"),
            ("too old", [("iat", "-1000"), ("exp", "600")], "too old"),
            ("foreign issuer", [("iss", "https://token.actions.githubusercontent.com")], "not the trusted issuer"),
            ("alg none", [("variant", "none")], "alg none"),
            ("HS256 keyed with the public key", [("variant", "hs256")], "HS256 is not accepted"),
            ("unknown kid", [("variant", "unknown-kid")], "unknown kid"),
            ("no jti", [("variant", "no-jti")], "missing claim jti"),
        ]
        for (name, query, reason) in cases {
            let token = try await fixture.issuer.token("gha", query)
            let result = try await fixture.exchange("gh", token: token)
            #expect(result.status == 4, "\(name): \(result.status) \(result.stderr)")
            #expect(result.stdout.isEmpty, "\(name)")
            #expect(result.stderr.contains(reason), "\(name): \(result.stderr)")
        }

        let unreachable = try await fixture.exchange("broken", token: try await fixture.issuer.token("broken"))
        #expect(
            unreachable.status == 4 && unreachable.stderr.contains("cannot fetch the JWKS"), "\(unreachable.stderr)")
        let liar = try await fixture.exchange("liar", token: try await fixture.issuer.token("liar"))
        #expect(liar.status == 4 && liar.stderr.contains("names another issuer"), "\(liar.stderr)")
        let untrusting = try await fixture.exchange("plain", token: try await fixture.issuer.token())
        #expect(untrusting.status == 4 && untrusting.stderr.contains("trusts no issuer"))
        let nobody = try await fixture.exchange("nobody", token: try await fixture.issuer.token())
        #expect(nobody.status == 4 && nobody.stderr.contains("no client nobody"))
        let garbage = try await fixture.exchange("gh", token: "not.a.jwt")
        #expect(garbage.status == 4 && garbage.stderr.contains("not valid"))

        // Raw protocol errors: a missing or unsupported parameter is invalid_request, not a token.
        let base: [(String, String)] = [
            ("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"), ("client_id", "gh"),
        ]
        let token = try await fixture.issuer.token()
        let badType = try await fixture.server.form(
            "/auth/token", base + [("subject_token", token), ("subject_token_type", "urn:x:saml")])
        #expect(badType.status == 400 && badType.error == "invalid_request")
        let actor = try await fixture.server.form(
            "/auth/token",
            base + [
                ("subject_token", token), ("subject_token_type", "urn:ietf:params:oauth:token-type:jwt"),
                ("actor_token", token),
            ])
        #expect(actor.status == 400 && actor.error == "invalid_request")
        let noToken = try await fixture.server.form("/auth/token", base)
        #expect(noToken.status == 400 && noToken.error == "invalid_request")
        // None of the refusals consumed the token: it still works once.
        let valid = try await fixture.exchange("gh", token: token)
        #expect(valid.status == 0, "\(valid.stderr)")
    }

    @Test func concurrentExchangesOnAColdCacheShareOneFetch() async throws {
        let fixture = try await MintFixture.start()
        try await fixture.addTrusting("gh", tenant: "cold")
        var tokens: [String] = []
        for _ in 0..<8 { tokens.append(try await fixture.issuer.token("cold")) }
        let statuses = try await withThrowingTaskGroup(of: CLI.Result.self) { group in
            for token in tokens { group.addTask { try await fixture.exchange("gh", token: token) } }
            return try await group.reduce(into: [CLI.Result]()) { $0.append($1) }
        }
        for result in statuses { #expect(result.status == 0, "\(result.stderr)") }
        #expect(try await fixture.issuer.jwksFetches("cold") == 1, "one fetch, the others waited for it")
    }

    /// End to end: the broker caches a CI platform's keys and refuses tokens with made-up kids. The exact
    /// refetch rules (one per new kid, at most one per 5 s) are proven on a manual clock in
    /// `IssuerDirectoryTests`, where crossing the interval needs no sleep.
    @Test func keysAreCachedAndMadeUpKidsRefused() async throws {
        let fixture = try await MintFixture.start()
        try await fixture.addTrusting("gh", tenant: "rotating")

        for _ in 0..<3 {
            let result = try await fixture.exchange("gh", token: try await fixture.issuer.token("rotating"))
            #expect(result.status == 0, "\(result.stderr)")
        }
        #expect(try await fixture.issuer.jwksFetches("rotating") == 1, "cached after the first fetch")

        for _ in 0..<5 {
            let forged = try await fixture.issuer.token("rotating", [("variant", "unknown-kid")])
            let result = try await fixture.exchange("gh", token: forged)
            #expect(result.status == 4 && result.stderr.contains("unknown kid"))
        }
    }
}

@Suite("client rules")
struct ClientRuleTests {
    @Test(
        "subjects match by Unicode scalars, not canonical equivalence",
        .bug(id: 18, "finding 4: KELVIN SIGN matched K and GREEK QUESTION MARK matched ;"))
    func subjectGlobComparesScalars() {
        #expect(!ClientRules.subject("repo:\u{212A}ube:ref", matches: "repo:Kube:ref"), "KELVIN SIGN is not K")
        #expect(!ClientRules.subject("repo:Kube:ref", matches: "repo:\u{212A}ube:ref"))
        #expect(!ClientRules.subject("a\u{037E}b", matches: "a;b"), "GREEK QUESTION MARK is not ;")
        #expect(!ClientRules.subject("caf\u{0065}\u{0301}", matches: "caf\u{00E9}"), "no normalisation either")
        #expect(ClientRules.subject("caf\u{00E9}", matches: "caf?"), "? is one scalar")
        #expect(!ClientRules.subject("caf\u{0065}\u{0301}", matches: "caf?"))
    }

    @Test func subjectGlobIsAnchoredAndLinear() {
        let pattern = "repo:acme/api:ref:refs/heads/*"
        #expect(ClientRules.subject("repo:acme/api:ref:refs/heads/main", matches: pattern))
        #expect(ClientRules.subject("repo:acme/api:ref:refs/heads/", matches: pattern))
        #expect(!ClientRules.subject("repo:acme/api:ref:refs/tags/v1", matches: pattern))
        #expect(!ClientRules.subject("xrepo:acme/api:ref:refs/heads/main", matches: pattern), "anchored at the start")
        #expect(!ClientRules.subject("repo:acme/api:ref:refs/heads/main", matches: "repo:acme/api"), "at the end")
        #expect(ClientRules.subject("repo:acme/api:environment:prod", matches: "repo:acme/*:environment:prod"))
        #expect(ClientRules.subject("abc", matches: "a?c") && !ClientRules.subject("ac", matches: "a?c"))
        #expect(ClientRules.subject("a*c", matches: #"a\*c"#) && !ClientRules.subject("abc", matches: #"a\*c"#))
        #expect(ClientRules.subject("", matches: "*") && !ClientRules.subject("", matches: "?"))
        // A pattern that is exponential for naive backtracking finishes at once.
        let hostile = String(repeating: "a", count: 5000)
        #expect(!ClientRules.subject(hostile, matches: String(repeating: "*a", count: 40) + "b"))
    }

    @Test func namesScopesIssuers() {
        #expect(ClientRules.validName("deploy-prod.v2_x"))
        for bad in ["", "-x", ".x", "a b", "a:b", "ä", String(repeating: "a", count: 65)] {
            #expect(!ClientRules.validName(bad), "\(bad)")
        }
        #expect(
            ClientRules.validScope("repo:write") && !ClientRules.validScope("a b") && !ClientRules.validScope("\"q\""))
        #expect(ClientRules.issuerProblem("https://token.actions.githubusercontent.com") == nil)
        #expect(ClientRules.issuerProblem("http://127.0.0.1:8080/gha") == nil)
        #expect(ClientRules.issuerProblem("http://gitlab.example.com") != nil)
        #expect(ClientRules.issuerProblem("http://localhost@evil.example") != nil)
        #expect(ClientRules.issuerProblem("https://gitlab.example.com?x=1") != nil)
    }

    @Test func secretHashIsKeyedAndConstantTime() throws {
        let one = ClientSecretHasher(key: Array(repeating: 1, count: 32))
        let two = ClientSecretHasher(key: Array(repeating: 2, count: 32))
        let secret = try ClientSecretHasher.newSecret()
        #expect(one.verify(secret, against: one.hash(secret)))
        #expect(!two.verify(secret, against: one.hash(secret)), "another key, another hash")
        #expect(!one.verify(Secret(secret.exposed + "x"), against: one.hash(secret)))
        #expect(!one.verify(secret, against: "$scrypt$ln=17,r=8,p=1$x$y"))
    }

    @Test func standardBase64ForBasicAuthentication() {
        #expect(Base64URL.decodeStandard("ZGVwbG95OnMzY3IzdA==") == Array("deploy:s3cr3t".utf8))
        #expect(Base64URL.decodeStandard("ZGVwbG95OnMzY3IzdA") == Array("deploy:s3cr3t".utf8))
        #expect(Base64URL.decodeStandard("+/+/") == [0xfb, 0xff, 0xbf])
        #expect(Base64URL.decodeStandard("ZGVwbG95OnMzY3IzdA=") == nil, "wrong padding")
        #expect(Base64URL.decodeStandard("-_-_") == nil, "the URL alphabet is not standard base64")
        #expect(Base64URL.decodeStandard("ZG Vw") == nil)
    }
}
