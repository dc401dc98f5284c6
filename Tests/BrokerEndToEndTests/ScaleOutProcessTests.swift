import BrokerCore
import BrokerPostgres
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Logging
import Testing

/// `broker serve`, `keys rotate`, `client add`, `db migrate` and `db copy` as processes on the test cluster.
@Suite("scale-out: broker processes on one PostgreSQL database")
struct ScaleOutProcessTests {
    static let password = "correct horse battery staple"
    /// The database password, and a store deadline of a minute instead of the default 5 s: these tests are
    /// about sharing a database, not about its speed, and one PostgreSQL serves every suite at once here.
    static let environment = [
        "BROKER_DATABASE_PASSWORD": TestPostgres.password, "BROKER_SERVER_DATABASE_TIMEOUT": "60",
    ]

    /// A fresh database, a master key file (0600) and the environment that carries the database password.
    struct Shared {
        let url: String
        let masterKeyFile: String
        let directory: URL
        var environment: [String: String] { ScaleOutProcessTests.environment }
        var options: [String] { ["--database", url, "--master-key-file", masterKeyFile] }

        static func make() async throws -> Shared {
            let directory = try TemporaryDirectory.make(prefix: "broker-scaleout")
            let file = directory.appendingPathComponent("master.key").path
            try Data((Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString() + "\n").utf8)
                .write(to: URL(fileURLWithPath: file))
            chmod(file, 0o600)
            return Shared(url: try await TestPostgres.freshDatabase(), masterKeyFile: file, directory: directory)
        }

        /// A broker on the shared database; replicas behind one load balancer share one issuer.
        /// `environment` is laid over ``environment``; it is what overrides the store deadline (an environment
        /// variable outranks the config file).
        func serve(
            config: String? = nil, issuer: String = "https://broker.example", environment: [String: String] = [:]
        ) async throws -> BrokerProcess {
            try await BrokerProcess.start(
                config: config, arguments: options + ["--issuer", issuer],
                environment: self.environment.merging(environment) { $1 })
        }
    }

    static func kids(_ server: BrokerProcess) async throws -> [String] {
        try await server.get("/.well-known/jwks.json")["keys"]?.arrayValue?.compactMap { $0["kid"]?.stringValue }
            ?? []
    }

    @Test func twoBrokersShareUsersKeysAndClients() async throws {
        let shared = try await Shared.make()
        let a = try await shared.serve()
        defer { a.stop() }
        let b = try await shared.serve()
        defer { b.stop() }
        #expect(try await a.register("ada@example.com", Self.password).status == 201)
        let session = try await b.login("ada@example.com", Self.password)
        let access = try #require(
            session["access_token"]?.stringValue, "\(session.status) \(String(describing: session.json))")
        #expect(try await a.me(access).status == 200)
        let before = try await Self.kids(a)
        let onB = try await Self.kids(b)
        #expect(before.count == 2 && onB == before, "one first key and one id-token key for both")

        let rotate = try await CLI.run(["keys", "rotate"] + shared.options, environment: shared.environment)
        #expect(rotate.status == 0, "\(rotate.stderr)")
        let kid = rotate.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        // Both serve it after their next maintenance tick (once a second); polled, not timed.
        for server in [a, b] {
            var served: [String] = []
            _ = try await eventually(every: .milliseconds(100)) {
                served = try await Self.kids(server)
                return served.first == kid && served.count == 4
            }
            // The new key signs, the previous still verifies; the id-token key rotated with them (new, previous).
            #expect(Array(served.prefix(2)) == [kid, before[0]], "\(served)")
            #expect(served.count == 4 && served[3] == before[1], "\(served)")
        }
        let fresh = try #require(try await a.login("ada@example.com", Self.password)["access_token"]?.stringValue)
        #expect(jwtParts(fresh).header?["kid"]?.stringValue == kid)
        #expect(try await b.me(fresh).status == 200)
        #expect(try await b.me(access).status == 200)

        let added = try await CLI.run(
            ["client", "add", "deploy", "--scope", "deploy", "--json"] + shared.options, environment: shared.environment
        )
        #expect(added.status == 0, "\(added.stderr)")
        let secret = try #require(JSONValue.parse(Array(added.stdout.utf8))?["client_secret"]?.stringValue)
        for server in [a, b] {
            let minted = try await server.form(
                "/auth/token",
                [
                    ("grant_type", "client_credentials"), ("client_id", "deploy"), ("client_secret", secret),
                    ("scope", "deploy"),
                ])
            #expect(minted.status == 200, "\(String(describing: minted.json))")
        }
    }

    @Test func migrateReportsTheVersionAndANewerDatabaseIsRefused() async throws {
        let shared = try await Shared.make()
        let migrated = try await CLI.run(["db", "migrate"] + shared.options, environment: shared.environment)
        #expect(migrated.status == 0 && migrated.stdout == "\(Schema.current)\n", "\(migrated.stderr)")
        #expect(
            migrated.stderr.contains("schema version") && !migrated.stderr.contains("broker:"), "\(migrated.stderr)")
        // A newer broker's migration, written as one would: the one write no store API makes.
        try await TestPostgres.psql(
            shared.url, "INSERT INTO broker_schema_migrations VALUES (\(Schema.current + 1), 'from the future', 0)")
        let again = try await CLI.run(["db", "migrate"] + shared.options, environment: shared.environment)
        #expect(again.status == 1 && again.stderr.contains("newer than this broker"), "\(again.stderr)")
        let serve = try await CLI.run(["serve", "--port", "0"] + shared.options, environment: shared.environment)
        #expect(serve.status == 1 && serve.stderr.contains("newer than this broker"), "\(serve.stderr)")
    }

    @Test func tenBrokersStartingTogetherMigrateOnce() async throws {
        let url = try await TestPostgres.freshDatabase()
        guard case .postgres(let location) = try DatabaseLocation.parse(url) else { return }
        let applied = try await withThrowingTaskGroup(of: [Int].self) { group in
            for _ in 0..<10 {
                group.addTask {
                    let store = try await PostgresStore.open(
                        location, password: TestPostgres.password, poolSize: 1, deadline: .seconds(60), migrate: false,
                        logger: Logger.test())
                    let versions = try await store.migrate()
                    await store.close()
                    return versions
                }
            }
            return try await group.reduce(into: [Int]()) { $0 += $1 }
        }
        #expect(applied.sorted() == Schema.migrations.map(\.version), "each migration ran once, in one broker")
        #expect(try await PostgresReader.with(url) { try await $0.schemaVersion() } == Schema.current)
    }

    @Test func startUpErrorsNameWhatFailed() async throws {
        let shared = try await Shared.make()
        // Nothing listens on port 1.
        let unreachable = try await CLI.run(
            ["serve", "--port", "0", "--database", "postgres://broker@127.0.0.1:1/broker"],
            environment: ["BROKER_DATABASE_PASSWORD": "x", "BROKER_SERVER_DATABASE_TIMEOUT": "3"])
        #expect(unreachable.status == 1 && unreachable.stderr.contains("127.0.0.1:1"), "\(unreachable.stderr)")
        #expect(!unreachable.stderr.contains("x@"), "no password in the message")

        let noMaster = try await CLI.run(
            ["serve", "--port", "0", "--database", shared.url], environment: shared.environment)
        #expect(noMaster.status == 1 && noMaster.stderr.contains("--master-key-file"), "\(noMaster.stderr)")

        let server = try await shared.serve()
        server.stop()
        let wrong = shared.directory.appendingPathComponent("wrong.key").path
        try Data((Data(repeating: 9, count: 32).base64EncodedString()).utf8).write(to: URL(fileURLWithPath: wrong))
        let wrongMaster = try await CLI.run(
            ["serve", "--port", "0", "--database", shared.url, "--master-key-file", wrong],
            environment: shared.environment)
        #expect(wrongMaster.status == 1 && wrongMaster.stderr.contains("does not open"), "\(wrongMaster.stderr)")
        #expect(wrongMaster.stderr.contains(wrong))
        #expect(try await PostgresReader.count(shared.url, "signing_keys") == 1, "no key was regenerated")

        let badPassword = try await CLI.run(
            ["db", "migrate"] + shared.options, environment: ["BROKER_DATABASE_PASSWORD": "not the password"])
        #expect(badPassword.status == 1 && badPassword.stderr.contains("authentication"), "\(badPassword.stderr)")
    }

    @Test func copyFromSQLiteToPostgresAndBackKeepsEveryoneSignedIn() async throws {
        // A single SQLite broker with a user, a session and a CI client.
        let single = try await BrokerProcess.start()
        #expect(try await single.register("ada@example.com", Self.password).status == 201)
        let session = try await single.login("ada@example.com", Self.password)
        let refresh = try #require(session["refresh_token"]?.stringValue)
        let access = try #require(session["access_token"]?.stringValue)
        let added = try await CLI.run(["client", "add", "deploy", "--json", "--data-dir", single.dataDirectory])
        let secret = try #require(JSONValue.parse(Array(added.stdout.utf8))?["client_secret"]?.stringValue)
        // And an app (a relying party), which the copy carries with its redirect URIs.
        let app = try await CLI.run(
            [
                "client", "add", "wiki", "--redirect-uri", "https://wiki.example/cb", "--json", "--data-dir",
                single.dataDirectory,
            ])
        #expect(app.status == 0, "\(app.stderr)")
        #expect(try await single.terminate() == 0)

        let url = try await TestPostgres.freshDatabase()
        let environment = Self.environment
        let sqlite = "sqlite:" + single.dataDirectory + "/broker.sqlite3"
        let copied = try await CLI.run(["db", "copy", "--from", sqlite, "--to", url], environment: environment)
        #expect(copied.status == 0, "\(copied.stderr)")
        #expect(copied.stderr.contains("sealed under") && !copied.stderr.contains("broker:"), "\(copied.stderr)")
        #expect(copied.stdout.contains("users 1") && copied.stdout.contains("clients 1"), "\(copied.stdout)")
        #expect(copied.stdout.contains("apps 1"), "\(copied.stdout)")
        let listed = try await CLI.run(
            [
                "client", "list", "--json", "--database", url, "--master-key-file",
                single.dataDirectory + "/keys/master.key",
            ],
            environment: environment)
        let apps = JSONValue.parse(Array(listed.stdout.utf8))?["clients"]?.arrayValue ?? []
        #expect(
            apps.first { $0["client_id"] == "wiki" }?["redirect_uris"] == ["https://wiki.example/cb"],
            "\(listed.stdout)")
        #expect(copied.stderr.contains("master.key"))
        let again = try await CLI.run(["db", "copy", "--from", sqlite, "--to", url], environment: environment)
        #expect(again.status == 1 && again.stderr.contains("not empty"), "\(again.stderr)")

        // The PostgreSQL broker runs with the single broker's master key: tokens and secrets carry over.
        let master = single.dataDirectory + "/keys/master.key"
        let moved = try await BrokerProcess.start(
            arguments: ["--database", url, "--master-key-file", master], environment: environment)
        defer { moved.stop() }
        // The signing key moved with the data (the issuer is this test broker's own address, so the old token
        // itself does not verify here).
        let signedBy = try #require(jwtParts(access).header?["kid"]?.stringValue)
        #expect(try await Self.kids(moved).contains(signedBy), "the key that signed before the move is published")
        let rotated = try await moved.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh)])
        #expect(rotated.status == 200, "the refresh token from SQLite rotates on PostgreSQL")
        let next = try #require(rotated["refresh_token"]?.stringValue)
        let minted = try await moved.form(
            "/auth/token", [("grant_type", "client_credentials"), ("client_id", "deploy"), ("client_secret", secret)])
        #expect(minted.status == 200)
        #expect(try await moved.terminate() == 0)

        // And back, into a new SQLite file.
        let back = try TemporaryDirectory.make(prefix: "broker-copy-back").appendingPathComponent("data")
        try FileManager.default.createDirectory(at: back, withIntermediateDirectories: true)
        let returned = try await CLI.run(
            ["db", "copy", "--from", url, "--to", "sqlite:" + back.path + "/broker.sqlite3"], environment: environment)
        #expect(returned.status == 0, "\(returned.stderr)")
        let home = try await BrokerProcess.start(arguments: ["--data-dir", back.path, "--master-key-file", master])
        defer { home.stop() }
        let final = try await home.form("/auth/token", [("grant_type", "refresh_token"), ("refresh_token", next)])
        #expect(final.status == 200, "the session rotated on PostgreSQL continues on the copy")
        let replay = try await home.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refresh)])
        #expect(replay.status == 400, "the spent token stays spent")
    }
}
