package import BrokerCore
package import BrokerStore
package import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// The store several brokers share: PostgreSQL through PostgresNIO's connection pool.
///
/// What the SQLite store gets from its single writer, this one gets from row locks: a refresh token is read
/// `FOR UPDATE` before it is spent, so two brokers presenting it at once are served one after the other and
/// the second sees it used (reuse, the family is revoked); one-time values (codes, state markers, exchanged
/// `jti`s, accounts by email) are decided by primary keys and unique indexes. Every call has a deadline: a
/// database that does not answer is a ``StoreError/unavailable(_:)`` (HTTP 503), never a hang.
///
/// PostgreSQL features relied on (what a port to a compatible database must replace): `SELECT … FOR UPDATE`
/// (re-reading a row that changed while the lock was awaited), data-modifying `WITH` (a rotation in one statement),
/// `INSERT … ON CONFLICT … DO NOTHING / DO UPDATE`, `RETURNING`, partial unique indexes, transactional DDL and
/// `pg_advisory_xact_lock` (migrations), `LOCK TABLE` (key rotation), READ COMMITTED isolation, array parameters
/// (`= ANY($1)`: session and client reads that arrive together are answered by one query, ``ReadBatcher``).
package final class PostgresStore: Store {
    package let location: PostgresLocation
    let client: PostgresClient
    let clientConfiguration: PostgresClient.Configuration
    let runner: Task<Void, Never>
    let logger: Logger
    /// The longest one call may take before it is given up (and answered 503).
    let deadline: Duration
    /// Where the calls' deadlines are kept.
    let watch: DeadlineWatch
    /// Concurrent session reads (every `GET /auth/me`, every refresh of an access token's session) share queries.
    /// Where each call's time goes (``observe(_:)``).
    let observation = StoreObservation()
    let sessionReads: ReadBatcher<String, SessionView>
    /// Concurrent client reads (every `client_credentials` mint) share queries the same way.
    let clientReads: ReadBatcher<String, ClientRecord>
    /// How many calls' deadlines are being watched (for tests: none once every call has answered).
    package var watchedDeadlines: Int { watch.count }

    package var isShared: Bool { true }

    /// Connects, checks the database answers, and applies pending migrations under an advisory lock (ten
    /// brokers starting at once migrate once).
    /// - Parameters:
    ///   - password: from `BROKER_DATABASE_PASSWORD` or `server.database_password_file`; the URL's if `nil`.
    ///   - poolSize: the most connections this broker opens.
    ///   - migrate: `false` to refuse a database that is not at this binary's version instead of migrating it.
    package static func open(
        _ location: PostgresLocation,
        password: String?,
        poolSize: Int = 10,
        deadline: Duration = .seconds(5),
        migrate: Bool = true,
        logger: Logger
    ) async throws -> PostgresStore {
        let store = try PostgresStore(
            location: location, password: password, poolSize: poolSize, deadline: deadline, logger: logger)
        do {
            try await store.probe()
            try await store.ping()
            if migrate {
                try await store.migrate()
            } else {
                let version = try await store.schemaVersion()
                if version > Schema.current { throw Schema.newerThanBinary([version]) }
            }
        } catch {
            await store.close()
            throw error
        }
        return store
    }

    private init(
        location: PostgresLocation, password: String?, poolSize: Int, deadline: Duration, logger: Logger
    ) throws {
        self.location = location
        self.logger = logger
        self.deadline = deadline
        let watch = DeadlineWatch()
        self.watch = watch
        // A batched read is answered within the store's deadline in all, however long it queued.
        sessionReads = ReadBatcher(
            deadline: ReadDeadline(duration: deadline, watch: watch) {
                Self.timedOut(location: location, deadline: deadline, what: "session lookup")
            })
        clientReads = ReadBatcher(
            deadline: ReadDeadline(duration: deadline, watch: watch) {
                Self.timedOut(location: location, deadline: deadline, what: "client lookup")
            })
        let tls: PostgresClient.Configuration.TLS
        switch location.tls {
        case .disable:
            tls = .disable
        case .verifyFull:
            // NIOSSL's client default: full verification (chain and host name) against the system's roots.
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.certificateVerification = .fullVerification
            do {
                tls = .require(try NIOSSLContext(configuration: configuration).configuration)
            } catch {
                throw StoreError.unavailable("cannot set up TLS for PostgreSQL: \(error)")
            }
        }
        var configuration = PostgresClient.Configuration(
            host: location.host, port: location.port, username: location.user,
            password: password ?? location.passwordInURL, database: location.database, tls: tls)
        configuration.options.maximumConnections = max(1, poolSize)
        configuration.options.minimumConnections = 0
        configuration.options.connectTimeout = deadline
        configuration.options.connectionIdleTimeout = .seconds(60)
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        clientConfiguration = configuration
        self.client = client
        runner = Task.detached { await client.run() }
    }

    deinit { runner.cancel() }

    /// One connection made directly, outside the pool: the pool retries a failed connection until the deadline,
    /// which would hide why it failed (refused, unknown host, wrong password, no such database).
    func probe() async throws {
        var configuration = PostgresConnection.Configuration(
            host: location.host, port: location.port, username: clientConfiguration.username,
            password: clientConfiguration.password, database: location.database, tls: .disable)
        if location.tls == .verifyFull {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.certificateVerification = .fullVerification
            configuration.tls = .require(try NIOSSLContext(configuration: tls))
        }
        configuration.options.connectTimeout = .init(deadline)
        let logger = logger
        let settings = configuration
        try await run("connection") {
            let connection = try await PostgresConnection.connect(
                on: PostgresClient.defaultEventLoopGroup.next(), configuration: settings, id: 0, logger: logger
            ).get()
            try await connection.close()
        }
    }

    package func close() async {
        runner.cancel()
        await runner.value
    }

    // MARK: Plumbing

    enum Outcome<T: Sendable>: Sendable {
        case value(T)
        case timedOut
    }

    /// Runs `operation` with the store's deadline, mapping PostgreSQL's errors to ``StoreError``.
    ///
    /// The deadline answers even when the operation does not stop: a task group would wait for its cancelled
    /// child, and a query on a connection that died under it (the database stopped mid-transaction) was seen
    /// to ignore cancellation, so the request hung. Here the operation runs in a task of its own that is
    /// cancelled and left to finish by itself; the caller has its answer at the deadline, which the store's
    /// ``DeadlineWatch`` keeps.
    ///
    /// The choke point of every call: timed under the calling store method's name (`function`; `nil` for a
    /// batched read, which its callers time one by one).
    package func run<T: Sendable>(
        _ what: String, deadline: Duration? = nil, function: StaticString? = #function,
        _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        guard let function else { return try await runUntimed(what, deadline: deadline, operation) }
        return try await observation.timed(function) { try await runUntimed(what, deadline: deadline, operation) }
    }

    private func runUntimed<T: Sendable>(
        _ what: String, deadline: Duration?, _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let deadline = deadline ?? self.deadline
        let race = DeadlineRace<Outcome<T>>()
        let watch = watch
        let outcome: Outcome<T>
        do {
            outcome = try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    race.start(continuation)
                    let expiry = watch.watch(for: deadline) { race.finish(.success(.timedOut)) }
                    let work = Task {
                        do { race.finish(.success(.value(try await operation()))) } catch {
                            race.finish(.failure(error))
                        }
                    }
                    race.hold(work: work) { watch.release(expiry) }
                }
            } onCancel: {
                race.finish(.failure(CancellationError()))
            }
        } catch let error as PSQLError {
            throw Self.storeError(error, location: location, what: what)
        } catch let error as StoreError {
            throw error
        } catch let error as PostgresTransactionError {
            // The first thing that went wrong decides: the closure's error, else BEGIN's or COMMIT's.
            let cause = error.closureError ?? error.beginError ?? error.commitError ?? error.rollbackError
            if let cause = cause as? PSQLError { throw Self.storeError(cause, location: location, what: what) }
            if let cause = cause as? StoreError { throw cause }
            throw StoreError.unavailable("\(what) failed: \(cause.map { "\($0)" } ?? "transaction error")")
        } catch is CancellationError {
            throw StoreError.unavailable("\(what): cancelled")
        } catch {
            throw StoreError.unavailable("\(what) failed: \(error)")
        }
        switch outcome {
        case .value(let value): return value
        case .timedOut: throw Self.timedOut(location: location, deadline: deadline, what: what)
        }
    }

    /// The 503 of a call, or a batched read, that did not answer within its deadline.
    static func timedOut(location: PostgresLocation, deadline: Duration, what: String) -> StoreError {
        .unavailable("PostgreSQL at \(location.address) did not answer within \(deadline) (\(what))")
    }

    /// A unique violation is a conflict; anything else means the database could not do it (503).
    static func storeError(_ error: PSQLError, location: PostgresLocation, what: String) -> StoreError {
        if let state = error.serverInfo?[.sqlState], state == "23505" {
            return .conflict(error.serverInfo?[.message] ?? "duplicate key")
        }
        if let message = error.serverInfo?[.message] {
            return .unavailable("PostgreSQL at \(location.address) refused \(what): \(message)")
        }
        var reason = "\(error.code)"
        if let underlying = error.underlying { reason += ": \(underlying)" }
        return .unavailable("cannot reach PostgreSQL at \(location.address) (\(what)): \(reason)")
    }

    func transaction<T: Sendable>(
        _ what: String, deadline: Duration? = nil, function: StaticString = #function,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let client = client
        let logger = logger
        return try await run(what, deadline: deadline, function: function) {
            try await client.withTransaction(logger: logger) { connection in try await body(connection) }
        }
    }

    func query(_ what: String, _ query: PostgresQuery, function: StaticString = #function) async throws {
        let client = client
        try await run(what, function: function) { try await client.query(query).drain() }
    }

    package func observe(_ observer: any StoreObserver) { observation.set(observer) }

    // MARK: Migrations

    static let migrationLock: Int64 = 0x6272_6f6b_6572  // "broker"

    /// How long a migration may take, waiting for another broker's included: not the store's per-request
    /// deadline (a few seconds at start-up), since a migration on a large table, or nine brokers queued
    /// behind one, legitimately takes longer. A database that is down still fails at once.
    static let migrationDeadline: Duration = .seconds(600)

    /// Applies pending migrations in one transaction under an advisory lock; returns the versions applied.
    @discardableResult
    package func migrate() async throws -> [Int] {
        let logger = logger
        return try await transaction("migration", deadline: max(deadline, Self.migrationDeadline)) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Self.migrationLock))", logger: logger)
                .drain()
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS broker_schema_migrations (
                    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)
                """, logger: logger
            ).drain()
            var applied: [Int] = []
            for try await version in try await connection.query(
                "SELECT version FROM broker_schema_migrations", logger: logger
            ).decode(Int.self) {
                applied.append(version)
            }
            let known = Set(Schema.migrations.map(\.version))
            let unknown = applied.filter { !known.contains($0) }
            if !unknown.isEmpty { throw Schema.newerThanBinary(unknown) }
            var done: [Int] = []
            for migration in Schema.migrations where !applied.contains(migration.version) {
                for statement in Self.statements(migration.postgres) {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger).drain()
                }
                try await connection.query(
                    """
                    INSERT INTO broker_schema_migrations (version, name, applied_at)
                    VALUES (\(migration.version), \(migration.name), EXTRACT(EPOCH FROM now())::BIGINT)
                    """, logger: logger
                ).drain()
                done.append(migration.version)
            }
            return done
        }
    }

    /// The statements of a migration's script (no `;` inside literals in ours).
    static func statements(_ script: String) -> [String] {
        script.split(separator: ";").map { $0.trimmingCharacters(in: " \n\t") }.filter { !$0.isEmpty }
    }

    package func schemaVersion() async throws -> Int {
        let client = client
        return try await run("schema version") {
            let exists = try await client.query("SELECT to_regclass('broker_schema_migrations') IS NOT NULL")
                .decode(Bool.self).first { _ in true }
            guard exists == true else { return 0 }
            return try await client.query("SELECT COALESCE(MAX(version), 0) FROM broker_schema_migrations")
                .decode(Int.self).first { _ in true } ?? 0
        }
    }

    package func ping() async throws {
        try await query("ping", "SELECT 1")
    }

}

extension PostgresRowSequence {
    /// Reads the response to its end (so that an error after the first row still surfaces).
    func drain() async throws {
        for try await _ in self {}
    }
}

extension Substring {
    func trimmingCharacters(in set: String) -> String {
        String(drop { set.contains($0) }.reversed().drop { set.contains($0) }.reversed())
    }
}

// MARK: Prepared statements (the hot paths)

/// The sessions of a batch of `GET /auth/me` and other session reads (``ReadBatcher``), each with its user and
/// the password account's address confirmation.
struct SessionsWithUser: PostgresPreparedStatement {
    static let name = "broker_sessions_with_user"
    static let sql = """
        SELECT s.id, s.user_id, s.client_id, s.scope, s.created_at, s.revoked_at, u.email, u.name, u.created_at,
               s.signed_in_with, a.email_verified_at
        FROM sessions s JOIN users u ON u.id = s.user_id LEFT JOIN password_accounts a ON a.user_id = u.id
        WHERE s.id = ANY($1)
        """
    typealias Row = (String, String, String, String?, Int64, Int64?, String?, String?, Int64, String?, Int64?)
    var ids: [String]

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings()
        bindings.append(ids)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// The clients of a batch of `client_credentials` and token-exchange grants (``ReadBatcher``).
struct ClientsByName: PostgresPreparedStatement {
    static let name = "broker_clients_by_name"
    static let sql = """
        SELECT name, secret_hash, scopes, trust_issuer, trust_subject, trust_audience, trust_max_age, created_at
        FROM clients WHERE name = ANY($1)
        """
    typealias Row = (String, String, String, String?, String?, String?, Int64?, Int64)
    var names: [String]

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings()
        bindings.append(names)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// A rotation in one statement. `found` locks the token and its session (a second broker presenting the same
/// token waits there, then reads the row as the first one left it: PostgreSQL re-reads a locked row that changed
/// while it waited). On what `found` read, exactly one of the two writes acts: a live, unexpired, unused token of
/// a live session is spent and its successor inserted; a used token of a live session revokes the session
/// (reuse, RFC 9700 §4.14.2). The row answers with what was found and whether the token was spent here. Its
/// two writes act exactly where ``RotationRule`` answers `rotate` and `reused` (it must decide inside the
/// statement to be atomic): change them together; SessionContract holds both stores to the rule.
struct RotateRefreshToken: PostgresPreparedStatement {
    static let name = "broker_rotate_refresh_token"
    static let sql = """
        WITH found AS (
            SELECT t.hash, t.expires_at, t.used_at, s.id, s.user_id, s.client_id, s.scope, s.created_at,
                   s.revoked_at, u.email, u.name, u.created_at AS user_created_at, s.signed_in_with,
                   a.email_verified_at, s.dpop_jkt
            FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id JOIN users u ON u.id = s.user_id
            LEFT JOIN password_accounts a ON a.user_id = u.id
            WHERE t.hash = $1 FOR UPDATE OF t, s
        ), spent AS (
            UPDATE refresh_tokens r SET used_at = $2 FROM found f
            WHERE r.hash = f.hash AND r.used_at IS NULL
              AND f.revoked_at IS NULL AND f.used_at IS NULL AND f.expires_at > $2
              AND (f.dpop_jkt IS NULL OR f.dpop_jkt = $5)
            RETURNING f.id AS session_id
        ), successor AS (
            INSERT INTO refresh_tokens (hash, session_id, created_at, expires_at)
            SELECT $3, session_id, $2, $4 FROM spent
        ), reuse AS (
            UPDATE sessions s SET revoked_at = $2 FROM found f
            WHERE s.id = f.id AND s.revoked_at IS NULL AND f.revoked_at IS NULL AND f.used_at IS NOT NULL
              AND (f.dpop_jkt IS NULL OR f.dpop_jkt = $5)
        )
        SELECT expires_at, used_at, id, user_id, client_id, scope, created_at, revoked_at, email, name,
               user_created_at, signed_in_with, email_verified_at, (SELECT count(*) FROM spent), dpop_jkt
        FROM found
        """
    typealias Row = (
        Int64, Int64?, String, String, String, String?, Int64, Int64?, String?, String?, Int64, String?, Int64?, Int64,
        String?
    )
    var hash: String
    var now: Int64
    var nextHash: String
    var nextExpiresAt: Int64
    /// The thumbprint of the DPoP key the request proved (`nil`: none); a bound session's token is not spent
    /// without it.
    var proofKey: String?

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings()
        bindings.append(hash)
        bindings.append(now)
        bindings.append(nextHash)
        bindings.append(nextExpiresAt)
        bindings.append(proofKey)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

struct InsertRefreshToken: PostgresPreparedStatement {
    static let name = "broker_insert_refresh_token"
    static let sql = """
        INSERT INTO refresh_tokens (hash, session_id, created_at, expires_at) VALUES ($1, $2, $3, $4) RETURNING 1
        """
    typealias Row = Int32
    var hash: String
    var sessionID: String
    var createdAt: Int64
    var expiresAt: Int64

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings()
        bindings.append(hash)
        bindings.append(sessionID)
        bindings.append(createdAt)
        bindings.append(expiresAt)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

extension PostgresStore {
    package func exportRows(_ table: Schema.Table) async throws -> [[StoreValue]] {
        let client = client
        return try await run("export of \(table.name)") {
            var rows: [[StoreValue]] = []
            for try await row in try await client.query(
                PostgresQuery(unsafeSQL: "SELECT \(table.columnList) FROM \(table.name)"))
            {
                let cells = row.makeRandomAccess()
                var values: [StoreValue] = []
                for (index, column) in table.columns.enumerated() {
                    switch column.kind {
                    case .integer: values.append(try cells[index].decode(Int64?.self).map(StoreValue.integer) ?? .null)
                    case .text: values.append(try cells[index].decode(String?.self).map(StoreValue.text) ?? .null)
                    }
                }
                rows.append(values)
            }
            return rows
        }
    }

    package func importRows(_ tables: [(Schema.Table, [[StoreValue]])]) async throws {
        let logger = logger
        try await transaction("import") { connection in
            for (table, rows) in tables {
                let marks = (1...table.columns.count).map { "$\($0)" }.joined(separator: ", ")
                let sql = "INSERT INTO \(table.name) (\(table.columnList)) VALUES (\(marks))"
                for row in rows {
                    var bindings = PostgresBindings()
                    for (value, column) in zip(row, table.columns) {
                        switch (value, column.kind) {
                        case (.integer(let number), _): bindings.append(number)
                        case (.text(let text), _): bindings.append(text)
                        case (.null, .integer): bindings.append(Int64?.none)
                        case (.null, .text): bindings.append(String?.none)
                        }
                    }
                    try await connection.query(PostgresQuery(unsafeSQL: sql, binds: bindings), logger: logger).drain()
                }
            }
        }
    }

    package func count(_ table: Schema.Table) async throws -> Int {
        let client = client
        return try await run("count of \(table.name)") {
            var total = 0
            for try await count in try await client.query(
                PostgresQuery(unsafeSQL: "SELECT count(*) FROM \(table.name)")
            ).decode(Int.self) {
                total = count
            }
            return total
        }
    }
}

/// The first of an operation, its deadline and the caller's cancellation to finish resumes the caller; the
/// others find the continuation gone. Whichever wins cancels the operation's task (its cancellation is then up to
/// it; nobody waits for it) and takes its deadline off the watch.
private final class DeadlineRace<Value: Sendable>: Sendable {
    struct State {
        var continuation: CheckedContinuation<Value, any Error>?
        var pending: Result<Value, any Error>?
        var work: Task<Void, Never>?
        var release: (@Sendable () -> Void)?
    }
    let state = Mutex(State())

    func start(_ continuation: CheckedContinuation<Value, any Error>) {
        let early = state.withLock { state -> Result<Value, any Error>? in
            if let pending = state.pending { return pending }
            state.continuation = continuation
            return nil
        }
        // Cancelled before it started: answer at once.
        if let early { continuation.resume(with: early) }
    }

    func hold(work: Task<Void, Never>, release: @escaping @Sendable () -> Void) {
        let finished = state.withLock { state -> Bool in
            state.work = work
            state.release = release
            return state.continuation == nil
        }
        if finished {
            work.cancel()
            release()
        }
    }

    func finish(_ result: Result<Value, any Error>) {
        let (continuation, work, release) = state.withLock { state in
            guard state.pending == nil else {
                return (
                    CheckedContinuation<Value, any Error>?.none, Task<Void, Never>?.none,
                    (@Sendable () -> Void)?.none
                )
            }
            state.pending = result
            defer { state.continuation = nil }
            return (state.continuation, state.work, state.release)
        }
        continuation?.resume(with: result)
        work?.cancel()
        release?()
    }
}
