import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerStore
import BrokerSystem
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// What survives a restart, key rotation, stored hashes, configuration and signals.
@Suite("broker serve lifecycle", .hangBound)
struct LifecycleTests {
    static let password = "correct horse battery staple"

    @Test func restartOnTheSameDataKeepsAccountsKeysAndSessions() async throws {
        // The issuer is part of every token; pin it, since each start gets a new port.
        let config = #"{"server": {"issuer": "http://broker.test"}}"#
        let first = try await BrokerProcess.start(config: config)
        let session = try await first.register("keep@example.com", Self.password)
        let access = try #require(session["access_token"]?.stringValue)
        let refresh = try #require(session["refresh_token"]?.stringValue)
        let jwks = try await first.get("/.well-known/jwks.json")
        #expect(try await first.terminate() == 0)

        let second = try await BrokerProcess.start(config: config, directory: first.directory)
        defer { second.stop() }
        #expect(try await second.get("/.well-known/jwks.json").json == jwks.json, "same key after restart")
        let login = try await second.login("keep@example.com", Self.password)
        #expect(login.status == 200 && login["user_id"] == session["user_id"])
        let refreshed = try await second.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh)])
        #expect(refreshed.status == 200)
        #expect(try await second.me(access).status == 200, "a token from before the restart is still valid")
        let modes = try FileManager.default.attributesOfItem(atPath: second.dataDirectory)[.posixPermissions] as? Int
        #expect(modes == 0o700)
        let ring =
            try FileManager.default.attributesOfItem(atPath: second.dataDirectory + "/keys")[.posixPermissions] as? Int
        #expect(ring == 0o700)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: second.dataDirectory + "/keys").contains("master.key"))
        for file in try FileManager.default.contentsOfDirectory(atPath: second.dataDirectory + "/keys")
        where !file.hasPrefix(".") {
            let mode =
                try FileManager.default.attributesOfItem(atPath: second.dataDirectory + "/keys/" + file)[
                    .posixPermissions] as? Int
            #expect(mode == 0o600, "\(file)")
        }
        let database =
            try FileManager.default.attributesOfItem(atPath: second.dataDirectory + "/broker.sqlite3")[
                .posixPermissions] as? Int
        #expect(database == 0o600)
    }

    @Test func keyRotationKeepsOldTokensValid() async throws {
        let server = try await BrokerProcess.start()
        defer { server.stop() }
        let before = try await server.register("rotate@example.com", Self.password)
        let oldAccess = try #require(before["access_token"]?.stringValue)
        let oldKid = try #require(jwtParts(oldAccess).header?["kid"]?.stringValue)

        let rotate = try await CLI.run(["keys", "rotate", "--data-dir", server.dataDirectory])
        #expect(rotate.status == 0, "\(rotate.stderr)")
        // Success is said as a note, not as an error ("broker:" is what errors begin with).
        #expect(rotate.stderr.contains("is now current") && !rotate.stderr.contains("broker:"), "\(rotate.stderr)")
        let newKid = rotate.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!newKid.isEmpty && newKid != oldKid)

        // The running server picks the new key up at its next maintenance tick (every second): polled.
        var kids: [String] = []
        _ = try await eventually(every: .milliseconds(100)) {
            let jwks = try await server.get("/.well-known/jwks.json")
            kids = jwks["keys"]?.arrayValue?.compactMap { $0["kid"]?.stringValue } ?? []
            return kids.count == 4
        }
        // The ring's new and previous keys, then the id-token keys, rotated together (new, previous).
        #expect(Array(kids.prefix(2)) == [newKid, oldKid])
        #expect(kids.count == 4 && !kids[2...].contains(oldKid) && kids[2] != kids[3])
        let after = try await server.login("rotate@example.com", Self.password)
        let newAccess = try #require(after["access_token"]?.stringValue)
        let headerKid = jwtParts(newAccess).header?["kid"]?.stringValue
        #expect(headerKid == newKid, "new tokens are signed with the new key")
        #expect(try await server.me(oldAccess).status == 200, "tokens of the previous key stay valid")
        #expect(try await server.me(newAccess).status == 200)
    }

    @Test func loginUpgradesAnOutdatedHashAndBoundsAHostileOne() async throws {
        let first = try await BrokerProcess.start()
        #expect(try await first.register("old@example.com", Self.password).status == 201)
        #expect(try await first.register("hostile@example.com", Self.password).status == 201)
        #expect(try await first.terminate() == 0)

        let store = try SQLiteStore(path: first.dataDirectory + "/broker.sqlite3")
        let weak = try PasswordHasher(parameters: .init(logN: 14, r: 8, p: 1)).hash(Secret(Self.password))
        let hostile = "$scrypt$ln=40,r=8,p=1$c2FsdHNhbHRzYWx0c2FsdA$" + String(repeating: "A", count: 43)
        for (email, hash) in [("old@example.com", weak), ("hostile@example.com", hostile)] {
            let current = try #require(try await store.passwordAccount(email: email)).passwordHash
            try await store.updatePasswordHash(email: email, from: current, to: hash)
            #expect(try await store.passwordAccount(email: email)?.passwordHash == hash)
        }

        let server = try await BrokerProcess.start(directory: first.directory)
        defer { server.stop() }
        #expect(try await server.login("old@example.com", Self.password).status == 200)
        let upgraded = try await store.passwordAccount(email: "old@example.com")?.passwordHash
        #expect(upgraded?.hasPrefix("$scrypt$ln=17,r=8,p=1$") == true, "\(upgraded ?? "-")")
        #expect(try await server.login("old@example.com", Self.password).status == 200)

        let refused = try await server.login("hostile@example.com", Self.password)
        #expect(refused.status == 500 && refused.error == "server_error")
        #expect(try await server.get("/healthz").status == 200)
        #expect(server.stderr.contains("stored password hash cannot be used"))
        // Refused by the parameter bounds, before any of the 2^40 work: the reason the log gives, not a time.
        #expect(server.stderr.contains("parameters out of bounds (ln=40,r=8,p=1)"), "\(server.stderr.suffix(800))")
    }

    @Test(arguments: [
        ("ed25519", "EdDSA"), ("rsa", "RS256"), ("ec", "ES256"),
    ])
    func signingKeyFlag(kind: String, algorithm: String) async throws {
        let directory = try BrokerProcess.temporaryDirectory()
        let key = directory.appendingPathComponent("key.pem").path
        switch kind {
        case "ed25519": try await CLI.openssl(["genpkey", "-algorithm", "ed25519", "-out", key])
        case "rsa":
            try await CLI.openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", key])
        default:
            try await CLI.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key])
        }
        let server = try await BrokerProcess.start(arguments: ["--signing-key", key], directory: directory)
        defer { server.stop() }
        let jwks = try await server.get("/.well-known/jwks.json")
        // The given key, and the RSA key of apps' id tokens.
        #expect(jwks["keys"]?.arrayValue?.map { $0["alg"] } == [.string(algorithm), "RS256"])
        let session = try await server.register("key-\(kind)@example.com", Self.password)
        let access = try #require(session["access_token"]?.stringValue)
        let verified = try await Interop.run(["verify_broker_token.py", server.url, access])
        #expect(verified.status == 0, "\(verified.stderr)")
        #expect(!FileManager.default.fileExists(atPath: server.dataDirectory + "/keys/keyring.json"))
    }

    @Test func sigtermFinishesRequestsInFlightAndExitsZero() async throws {
        // A request held inside the broker: a token exchange whose issuer keeps its discovery answer until told.
        // Its arrival at the issuer is the event that shows the request in flight (no sleep, no window).
        // The broker waits for the issuer as long as it holds (server.http_timeout): however slowly a busy machine
        // gets from the arrival to the release, the request is still in flight.
        let fixture = try await MintFixture.start(httpTimeout: 600)
        let server = fixture.server
        try await fixture.addTrusting("gh", tenant: "held")
        let token = try await fixture.issuer.token("held")
        async let exchange = server.form(
            "/auth/token",
            [
                ("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"), ("client_id", "gh"),
                ("subject_token", token), ("subject_token_type", "urn:ietf:params:oauth:token-type:jwt"),
            ])
        try #require(try await fixture.issuer.heldRequestArrived(), "the broker asked the held issuer")

        server.process.send(SIGTERM)
        // The shutdown has begun once the listener refuses new connections; only then may the request finish.
        let refused = try await eventually {
            do {
                _ = try await server.get("/healthz")
                return false
            } catch let error as HTTPClientError {
                // A probe accepted just before the close may be cut off instead: that is not the refusal yet.
                return error.kind == .connectionFailed
            }
        }
        #expect(refused, "the listener closed on SIGTERM")
        try await fixture.issuer.release()
        let reply = try await exchange
        #expect(reply.status == 200, "the request in flight completes: \(reply.response.bodyText)")
        #expect(reply["access_token"]?.stringValue != nil)
        #expect(try await server.terminate() == 0)
        // The log says when the shutdown began and that it ended (the default request_timeout is 30 s).
        let log = server.stderr
        let began = try #require(
            log.range(of: "shutting down: no new connections; requests in flight finish within 35 s"), "\(log)")
        let ended = try #require(log.range(of: "stopped"))
        #expect(began.upperBound <= ended.lowerBound, "\(log.suffix(800))")

        let again = try await BrokerProcess.start(directory: server.directory)
        #expect(try await again.terminate(signal: SIGINT) == 0)
    }

    @Test func environmentAndFlagsOverrideTheFile() async throws {
        let server = try await BrokerProcess.start(
            config: #"{"server": {"access_token_ttl": 900, "audience": "file-audience", "port": 1}}"#,
            environment: ["BROKER_SERVER_ACCESS_TOKEN_TTL": "600"]
        )
        defer { server.stop() }
        let session = try await server.register("env@example.com", Self.password)
        #expect(session["expires_in"] == .int(600), "environment over file")
        let claims = jwtParts(try #require(session["access_token"]?.stringValue)).claims
        #expect(claims?["aud"] == "file-audience")
        #expect(!server.url.hasSuffix(":1"), "--port 0 over the file's port")
        // On 127.0.0.1 passkeys are off, and the start says so with the key that turns them on.
        let started = server.stderr
        #expect(started.contains("passkeys are off") && started.contains("server.webauthn_rp_id"), "\(started)")
        #expect(
            try await server.get("/auth/providers")["providers"]?.arrayValue?.contains { $0["id"] == "passkey" }
                == false)
    }

    /// Where `broker serve` runs Swift concurrency's jobs (`BROKER_CONCURRENCY_EXECUTOR`): by default on its event
    /// loops under NIO's take-over; `event-loops` there as jobs of no isolation, which the start checks with a task
    /// of its own; `dispatch` on Swift's pool. Each says so at debug level and serves a request that awaits the
    /// store and the password hasher's thread. A value that is not a choice is refused before anything is created.
    @Test func concurrencyExecutorChoices() async throws {
        let choices: [(value: String?, said: String)] = [
            (nil, "the event loops, isolated to them (NIO's take-over)"),
            ("event-loops", "the event loops, as jobs of no isolation (BROKER_CONCURRENCY_EXECUTOR=event-loops)"),
            ("dispatch", "Swift's own thread pool (BROKER_CONCURRENCY_EXECUTOR=dispatch)"),
        ]
        for choice in choices {
            var environment = ["BROKER_LOG_LEVEL": "debug"]
            environment["BROKER_CONCURRENCY_EXECUTOR"] = choice.value
            let server = try await BrokerProcess.start(environment: environment)
            defer { server.stop() }
            let session = try await server.register("executor@example.com", Self.password)
            #expect(session.status == 201, "\(choice.value ?? "unset"): \(session.response.bodyText)")
            let bearer = [(name: "Authorization", value: "Bearer \(session["access_token"]?.stringValue ?? "")")]
            #expect(try await server.get("/auth/me", headers: bearer)["user_id"] == session["user_id"])
            let said = server.stderr.split(separator: "\n").filter { $0.contains("Swift concurrency's jobs run on") }
            #expect(said.count == 1 && said[0].hasSuffix("jobs run on \(choice.said)"), "\(server.stderr)")
        }

        let directory = try BrokerProcess.temporaryDirectory()
        let data = directory.appendingPathComponent("data").path
        let refused = try await CLI.run(
            ["serve", "--port", "0", "--data-dir", data], environment: ["BROKER_CONCURRENCY_EXECUTOR": "pool"])
        #expect(refused.status != 0)
        #expect(
            refused.stderr.contains(
                "BROKER_CONCURRENCY_EXECUTOR=pool is not a choice: leave it unset, or set event-loops or dispatch"),
            "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: data), "nothing created")
    }
}
