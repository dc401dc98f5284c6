package import BrokerCore
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
    private let clientConfiguration: PostgresClient.Configuration
    private let runner: Task<Void, Never>
    let logger: Logger
    /// The longest one call may take before it is given up (and answered 503).
    private let deadline: Duration
    /// Where the calls' deadlines are kept.
    private let watch: DeadlineWatch
    /// Concurrent session reads (every `GET /auth/me`, every refresh of an access token's session) share queries.
    let sessionReads: ReadBatcher<String, SessionView>
    /// Concurrent client reads (every `client_credentials` mint) share queries the same way.
    let clientReads: ReadBatcher<String, ClientRecord>
    /// How many calls' deadlines are being watched (for tests: none once every call has answered).
    var watchedDeadlines: Int { watch.count }

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
    private func probe() async throws {
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

    private enum Outcome<T: Sendable>: Sendable {
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
    func run<T: Sendable>(
        _ what: String, deadline: Duration? = nil, _ operation: @escaping @Sendable () async throws -> T
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
        _ what: String, deadline: Duration? = nil, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let client = client
        let logger = logger
        return try await run(what, deadline: deadline) {
            try await client.withTransaction(logger: logger) { connection in try await body(connection) }
        }
    }

    func query(_ what: String, _ query: PostgresQuery) async throws {
        let client = client
        try await run(what) { try await client.query(query).drain() }
    }

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

    // MARK: Accounts and users

    package func createPasswordAccount(user: UserRecord, email: String, passwordHash: String, verifiedAt: Int64?)
        async throws
    {
        let logger = logger
        do {
            try await transaction("registration") { connection in
                try await Self.insert(user, connection, logger)
                try await connection.query(
                    """
                    INSERT INTO password_accounts (email, user_id, password_hash, updated_at, email_verified_at)
                    VALUES (\(email), \(user.id.description), \(passwordHash), \(user.createdAt), \(verifiedAt))
                    """, logger: logger
                ).drain()
            }
        } catch let error as StoreError where error.code == .conflict {
            throw StoreError.conflict("an account with this email exists")
        }
    }

    package func passwordAccount(email: String) async throws -> PasswordAccount? {
        let client = client
        return try await run("account lookup") {
            let rows = try await client.query(
                """
                SELECT a.email, a.password_hash, a.email_verified_at, u.id, u.email, u.name, u.created_at
                FROM password_accounts a JOIN users u ON u.id = a.user_id WHERE a.email = \(email)
                """
            ).decode((String, String, Int64?, String, String?, String?, Int64).self)
            for try await (email, hash, verifiedAt, id, userEmail, name, created) in rows {
                guard let userID = UserID(id) else { return nil }
                return PasswordAccount(
                    user: UserRecord(id: userID, email: userEmail, name: name, createdAt: created),
                    email: email, passwordHash: hash, emailVerifiedAt: verifiedAt)
            }
            return nil
        }
    }

    package func updatePasswordHash(email: String, from old: String, to new: String) async throws {
        try await query(
            "password rehash",
            """
            UPDATE password_accounts SET password_hash = \(new), updated_at = EXTRACT(EPOCH FROM now())::BIGINT
            WHERE email = \(email) AND password_hash = \(old)
            """)
    }

    package func signIn(_ identity: IdentityRecord, now: Int64) async throws -> IdentitySignIn {
        // Two first sign-ins of one identity at once: one inserts; the other meets the unique key, or (each
        // statement reads what is committed by then) finds the user but not, a moment earlier, the identity.
        // Tried again, it finds the identity the first one linked.
        do {
            let first = try await signInOnce(identity, now: now)
            guard case .unlinked = first else { return first }
            return try await signInOnce(identity, now: now)
        } catch let error as StoreError where error.code == .conflict {
            return try await signInOnce(identity, now: now)
        }
    }

    private func signInOnce(_ identity: IdentityRecord, now: Int64) async throws -> IdentitySignIn {
        let logger = logger
        return try await transaction("identity sign-in") { connection in
            let owners = try await connection.query(
                """
                UPDATE identities SET email = \(identity.email), name = \(identity.name)
                WHERE provider = \(identity.provider.rawValue) AND subject = \(identity.subject) RETURNING user_id
                """, logger: logger
            ).decode(String.self)
            var owner: String?
            for try await found in owners { owner = found }
            if let owner {
                // The user's own email and name follow the identity their id was made from.
                if owner == identity.derivedUserID.description {
                    try await connection.query(
                        "UPDATE users SET email = \(identity.email), name = \(identity.name) WHERE id = \(owner)",
                        logger: logger
                    ).drain()
                }
                let rows = try await connection.query(
                    "SELECT email, name, created_at FROM users WHERE id = \(owner)", logger: logger
                ).decode((String?, String?, Int64).self)
                for try await (email, name, created) in rows {
                    guard let id = UserID(owner) else { break }
                    return .user(UserRecord(id: id, email: email, name: name, createdAt: created))
                }
                throw StoreError.unavailable("the identity's user \(owner) is missing")
            }
            let id = identity.derivedUserID
            let existing = try await connection.query(
                "SELECT 1 FROM users WHERE id = \(id.description)", logger: logger
            ).decode(Int.self)
            for try await _ in existing { return .unlinked(from: id) }
            let user = UserRecord(id: id, email: identity.email, name: identity.name, createdAt: now)
            try await Self.insert(user, connection, logger)
            try await Self.insert(identity, user: id, now: now, connection, logger)
            return .user(user)
        }
    }

    private static func insert(
        _ identity: IdentityRecord, user: UserID, now: Int64, _ connection: PostgresConnection, _ logger: Logger
    ) async throws {
        try await connection.query(
            """
            INSERT INTO identities (provider, subject, user_id, email, name, linked_at)
            VALUES (\(identity.provider.rawValue), \(identity.subject), \(user.description), \(identity.email),
                    \(identity.name), \(now))
            """, logger: logger
        ).drain()
    }

    /// Locks `user`'s row for the rest of the transaction (one change to a user's ways in at a time);
    /// `false` when there is no such user.
    static func lockUser(_ user: UserID, _ connection: PostgresConnection, _ logger: Logger) async throws
        -> Bool
    {
        let rows = try await connection.query(
            "SELECT 1 FROM users WHERE id = \(user.description) FOR UPDATE", logger: logger
        ).decode(Int.self)
        for try await _ in rows { return true }
        return false
    }

    /// The first column of the first row of `query`, if any.
    static func first<T: PostgresDecodable & Sendable>(
        _ type: T.Type, _ query: PostgresQuery, _ connection: PostgresConnection, _ logger: Logger
    ) async throws -> T? {
        for try await value in try await connection.query(query, logger: logger).decode(T.self) { return value }
        return nil
    }

    // MARK: Device authorizations

    package func createDeviceAuthorization(_ record: DeviceAuthorization, maxPending: Int, now: Int64) async throws
        -> Bool
    {
        let logger = logger
        return try await transaction("device authorization") { connection in
            // One creation at a time, so that the bound holds across brokers.
            try await connection.query(
                "SELECT pg_advisory_xact_lock(\(Self.deviceLock))", logger: logger
            ).drain()
            let pending =
                try await Self.first(
                    Int64.self,
                    """
                    SELECT COUNT(*) FROM device_codes WHERE status = \(DeviceStatus.pending) AND expires_at > \(now)
                    """, connection, logger) ?? 0
            guard pending < maxPending else { return false }
            try await connection.query(
                """
                INSERT INTO device_codes (hash, user_code, client_id, provider, client_address, created_at,
                expires_at, poll_interval, status, link_user, link_session)
                VALUES (\(record.deviceCodeHash.hex), \(record.userCode), \(record.clientID),
                        \(record.provider?.rawValue), \(record.clientAddress), \(record.createdAt),
                        \(record.expiresAt), \(record.interval), \(DeviceStatus.pending),
                        \(record.linkUser?.description), \(record.linkSession))
                """, logger: logger
            ).drain()
            return true
        }
    }

    static let deviceLock: Int64 = 0x6272_6f6b_6465  // "brokde"

    package func pendingDeviceAuthorization(userCode: String, now: Int64) async throws -> DeviceAuthorization? {
        let client = client
        return try await run("device authorization") {
            let rows = try await client.query(
                """
                SELECT hash, user_code, client_id, provider, client_address, created_at, expires_at, poll_interval,
                link_user, link_session FROM device_codes WHERE user_code = \(userCode)
                AND status = \(DeviceStatus.pending) AND expires_at > \(now)
                """
            ).decode((String, String, String, String?, String?, Int64, Int64, Int64, String?, String?).self)
            for try await (hash, code, clientID, provider, address, created, expires, interval, link, linkSession)
                in rows
            {
                guard let bytes = SQLiteStore.bytes(hex: hash) else { return nil }
                return DeviceAuthorization(
                    deviceCodeHash: bytes, userCode: code, clientID: clientID,
                    provider: provider.flatMap(ProviderID.init(rawValue:)), clientAddress: address, createdAt: created,
                    expiresAt: expires, interval: interval, linkUser: link.flatMap(UserID.init),
                    linkSession: linkSession)
            }
            return nil
        }
    }

    package func decideDeviceAuthorization(userCode: String, user: UserID?, signedInWith: ProviderID?, now: Int64)
        async throws -> Bool
    {
        try await returnsRow(
            "device decision",
            """
            UPDATE device_codes SET status = \(user == nil ? DeviceStatus.denied : DeviceStatus.approved),
            user_id = \(user?.description), signed_in_with = \(user == nil ? nil : signedInWith?.rawValue)
            WHERE user_code = \(userCode) AND status = \(DeviceStatus.pending) AND expires_at > \(now) RETURNING 1
            """)
    }

    package func pollDeviceAuthorization(hash: [UInt8], now: Int64) async throws -> DevicePoll {
        let logger = logger
        return try await transaction("device poll") { connection in
            let rows = try await connection.query(
                """
                SELECT expires_at, poll_interval, last_polled_at, status, user_id, signed_in_with FROM device_codes
                WHERE hash = \(hash.hex) FOR UPDATE
                """, logger: logger
            ).decode((Int64, Int64, Int64?, String, String?, String?).self)
            var found: (Int64, Int64, Int64?, String, String?, String?)?
            for try await row in rows { found = row }
            guard let (expires, interval, last, status, user, signedInWith) = found else { return .unknown }
            if status == DeviceStatus.spent { return .spent }
            if now >= expires { return .expired }
            if let last, now - last < interval - 1 {
                try await connection.query(
                    """
                    UPDATE device_codes SET poll_interval = \(interval + 5), last_polled_at = \(now)
                    WHERE hash = \(hash.hex)
                    """, logger: logger
                ).drain()
                return .slowDown(interval: interval + 5)
            }
            switch status {
            case DeviceStatus.approved:
                guard let user = user.flatMap(UserID.init) else { return .denied }
                try await connection.query(
                    """
                    UPDATE device_codes SET status = \(DeviceStatus.spent), last_polled_at = \(now)
                    WHERE hash = \(hash.hex)
                    """, logger: logger
                ).drain()
                return .approved(user, signedInWith: signedInWith.flatMap(ProviderID.init(rawValue:)))
            case DeviceStatus.denied:
                return .denied
            default:
                try await connection.query(
                    "UPDATE device_codes SET last_polled_at = \(now) WHERE hash = \(hash.hex)", logger: logger
                ).drain()
                return .pending
            }
        }
    }

    // MARK: Linked identities

    package func identities(user: UserID) async throws -> [LinkedIdentity] {
        let client = client
        return try await run("identities") {
            let rows = try await client.query(
                """
                SELECT provider, subject, email, name, linked_at FROM identities WHERE user_id = \(user.description)
                ORDER BY linked_at, provider
                """
            ).decode((String, String, String?, String?, Int64).self)
            var linked: [LinkedIdentity] = []
            for try await (provider, subject, email, name, linkedAt) in rows {
                guard let provider = ProviderID(rawValue: provider) else { continue }
                linked.append(
                    LinkedIdentity(
                        identity: IdentityRecord(provider: provider, subject: subject, email: email, name: name),
                        userID: user, linkedAt: linkedAt))
            }
            return linked
        }
    }

    package func identityOwner(provider: ProviderID, subject: String) async throws -> UserID? {
        let client = client
        return try await run("identity owner") {
            let rows = try await client.query(
                "SELECT user_id FROM identities WHERE provider = \(provider.rawValue) AND subject = \(subject)"
            ).decode(String.self)
            for try await owner in rows { return UserID(owner) }
            return nil
        }
    }

    package func linkIdentity(_ identity: IdentityRecord, to user: UserID, now: Int64) async throws -> LinkOutcome {
        // The unique keys decide between two links at once; the loser, tried again, sees why it lost.
        do {
            return try await linkIdentityOnce(identity, to: user, now: now)
        } catch let error as StoreError where error.code == .conflict {
            return try await linkIdentityOnce(identity, to: user, now: now)
        }
    }

    private func linkIdentityOnce(_ identity: IdentityRecord, to user: UserID, now: Int64) async throws
        -> LinkOutcome
    {
        let logger = logger
        return try await transaction("identity link") { connection in
            guard try await Self.lockUser(user, connection, logger) else { return .userMissing }
            if let owner = try await Self.first(
                String.self,
                """
                SELECT user_id FROM identities
                WHERE provider = \(identity.provider.rawValue) AND subject = \(identity.subject)
                """, connection, logger)
            {
                return owner == user.description ? .alreadyLinked : .ownedByAnotherUser
            }
            if let other = try await Self.first(
                String.self,
                """
                SELECT subject FROM identities
                WHERE user_id = \(user.description) AND provider = \(identity.provider.rawValue)
                """, connection, logger)
            {
                return .providerTaken(subject: other)
            }
            // An identity unlinked from the user its id was made from may return to that user only.
            if identity.derivedUserID != user,
                try await Self.first(
                    Int.self, "SELECT 1 FROM users WHERE id = \(identity.derivedUserID.description)", connection, logger
                ) != nil
            {
                return .ownedByAnotherUser
            }
            try await Self.insert(identity, user: user, now: now, connection, logger)
            return .linked
        }
    }

    package func addPasswordAccount(user: UserID, email: String, passwordHash: String, now: Int64) async throws
        -> PasswordLinkOutcome
    {
        let logger = logger
        do {
            return try await transaction("password link") { connection in
                guard try await Self.lockUser(user, connection, logger) else { return .userMissing }
                if try await Self.first(
                    Int.self, "SELECT 1 FROM password_accounts WHERE user_id = \(user.description)", connection,
                    logger) != nil
                {
                    return .alreadyHasOne
                }
                let inserted = try await Self.first(
                    Int.self,
                    """
                    INSERT INTO password_accounts (email, user_id, password_hash, updated_at)
                    VALUES (\(email), \(user.description), \(passwordHash), \(now))
                    ON CONFLICT (email) DO NOTHING RETURNING 1
                    """, connection, logger)
                return inserted == nil ? .emailTaken : .added
            }
        } catch let error as StoreError where error.code == .conflict {
            // The user_id key: a second account for this user won a race.
            return .alreadyHasOne
        }
    }

    package func releaseUnverifiedAddress(email: String, now: Int64) async throws -> ReleasedAddress? {
        let logger = logger
        return try await transaction("address release") { connection in
            guard
                let owner = try await Self.first(
                    String.self,
                    "SELECT user_id FROM password_accounts WHERE email = \(email) AND email_verified_at IS NULL",
                    connection, logger),
                let user = UserID(owner)
            else { return nil }
            // The user's row first, as every change to a user's ways in does (one order, no deadlock).
            guard try await Self.lockUser(user, connection, logger) else { return nil }
            let deleted = try await Self.first(
                Int.self,
                """
                WITH gone AS (
                    DELETE FROM password_accounts WHERE email = \(email) AND user_id = \(owner)
                    AND email_verified_at IS NULL RETURNING 1
                ) SELECT count(*)::int FROM gone
                """, connection, logger)
            guard deleted == 1 else { return nil }
            try await connection.query(
                "UPDATE email_links SET used_at = \(now) WHERE user_id = \(owner) AND used_at IS NULL", logger: logger
            ).drain()
            try await connection.query(
                """
                UPDATE sessions SET revoked_at = \(now)
                WHERE user_id = \(owner) AND signed_in_with = \(ProviderID.custom.rawValue) AND revoked_at IS NULL
                """, logger: logger
            ).drain()
            try await Self.queueLogouts(
                connection, user: owner, provider: ProviderID.custom.rawValue, now: now, logger: logger)
            try await connection.query(
                """
                UPDATE browser_sessions SET revoked_at = \(now)
                WHERE user_id = \(owner) AND signed_in_with = \(ProviderID.custom.rawValue) AND revoked_at IS NULL
                """, logger: logger
            ).drain()
            let others =
                try await Self.first(
                    Int64.self, "SELECT COUNT(*) FROM identities WHERE user_id = \(owner)", connection, logger) ?? 0
            if others == 0 {
                try await connection.query("DELETE FROM users WHERE id = \(owner)", logger: logger).drain()
            }
            return ReleasedAddress(user: user, userDeleted: others == 0)
        }
    }

    package func unlinkIdentity(user: UserID, provider: ProviderID, now: Int64) async throws -> UnlinkOutcome {
        let logger = logger
        return try await transaction("identity unlink") { connection in
            guard try await Self.lockUser(user, connection, logger) else { return .notLinked }
            let identities =
                try await Self.first(
                    Int64.self, "SELECT COUNT(*) FROM identities WHERE user_id = \(user.description)", connection,
                    logger) ?? 0
            let passwords =
                try await Self.first(
                    Int64.self, "SELECT COUNT(*) FROM password_accounts WHERE user_id = \(user.description)",
                    connection, logger) ?? 0
            let has: Bool
            if provider == .custom {
                has = passwords > 0
            } else {
                has =
                    try await Self.first(
                        Int.self,
                        """
                        SELECT 1 FROM identities WHERE user_id = \(user.description) AND provider = \(provider.rawValue)
                        """, connection, logger) != nil
            }
            guard has else { return .notLinked }
            guard identities + passwords > 1 else { return .lastWayIn }
            if provider == .custom {
                try await connection.query(
                    "DELETE FROM password_accounts WHERE user_id = \(user.description)", logger: logger
                ).drain()
                try await connection.query(
                    """
                    UPDATE email_links SET used_at = \(now) WHERE user_id = \(user.description) AND used_at IS NULL
                    """, logger: logger
                ).drain()
            } else {
                try await connection.query(
                    """
                    DELETE FROM identities WHERE user_id = \(user.description) AND provider = \(provider.rawValue)
                    """, logger: logger
                ).drain()
            }
            let rows = try await connection.query(
                """
                UPDATE sessions SET revoked_at = \(now)
                WHERE user_id = \(user.description) AND signed_in_with = \(provider.rawValue) AND revoked_at IS NULL
                RETURNING id
                """, logger: logger
            ).decode(String.self)
            var ended: [String] = []
            for try await id in rows { ended.append(id) }
            try await Self.queueLogouts(
                connection, user: user.description, provider: provider.rawValue, now: now, logger: logger)
            try await connection.query(
                """
                UPDATE browser_sessions SET revoked_at = \(now)
                WHERE user_id = \(user.description) AND signed_in_with = \(provider.rawValue) AND revoked_at IS NULL
                """, logger: logger
            ).drain()
            return .unlinked(endedSessions: ended.sorted())
        }
    }

    package func user(id: UserID) async throws -> UserRecord? {
        let client = client
        return try await run("user lookup") {
            let rows = try await client.query(
                "SELECT email, name, created_at FROM users WHERE id = \(id.description)"
            ).decode((String?, String?, Int64).self)
            for try await (email, name, created) in rows {
                return UserRecord(id: id, email: email, name: name, createdAt: created)
            }
            return nil
        }
    }

    private static func insert(_ user: UserRecord, _ connection: PostgresConnection, _ logger: Logger) async throws {
        try await connection.query(
            """
            INSERT INTO users (id, provider, subject, email, name, created_at)
            VALUES (\(user.id.description), \(user.id.provider.rawValue), \(user.id.subject), \(user.email),
                    \(user.name), \(user.createdAt))
            """, logger: logger
        ).drain()
    }

    // MARK: Sessions and refresh tokens

    package func createSession(_ session: SessionRecord, firstToken: RefreshTokenRecord) async throws {
        let logger = logger
        try await transaction("session start") { connection in
            // FOR SHARE holds the user row until commit: a concurrent disable (which updates it) waits, then
            // revokes this session too; a disable that committed first leaves no row here.
            let live = try await connection.query(
                """
                SELECT 1 FROM users WHERE id = \(session.userID.description) AND disabled_at IS NULL FOR SHARE
                """, logger: logger
            ).decode(Int.self)
            var found = false
            for try await _ in live { found = true }
            guard found else { throw StoreError(code: .disabled, reason: "the user is disabled or gone") }
            try await connection.query(
                """
                INSERT INTO sessions (id, user_id, client_id, scope, created_at, signed_in_with, dpop_jkt)
                VALUES (\(session.id), \(session.userID.description), \(session.clientID), \(session.scope),
                        \(session.createdAt), \(session.signedInWith?.rawValue), \(session.dpopJKT))
                """, logger: logger
            ).drain()
            for try await _ in try await connection.execute(
                InsertRefreshToken(
                    hash: firstToken.hash.hex, sessionID: session.id, createdAt: firstToken.createdAt,
                    expiresAt: firstToken.expiresAt),
                logger: logger)
            {}
        }
    }

    package func rotateRefreshToken(
        hash: [UInt8], nextHash: [UInt8], nextExpiresAt: Int64, now: Int64, proofKey: String?
    ) async throws -> RotationOutcome {
        let client = client
        // One statement, so one round trip and its own transaction: see `RotateRefreshToken` for how it decides.
        let found = try await run("refresh token rotation") { () -> RotationRow? in
            let statement = RotateRefreshToken(
                hash: hash.hex, now: now, nextHash: nextHash.hex, nextExpiresAt: nextExpiresAt, proofKey: proofKey)
            for try await row in try await client.execute(statement) {
                let (
                    expires, used, id, user, clientID, scope, created, revoked, email, name, userCreated, way, verified,
                    spent, bound
                ) = row
                guard
                    var view = Self.sessionView(
                        id: id, user: user, clientID: clientID, scope: scope, createdAt: created, revokedAt: revoked,
                        email: email, name: name, userCreatedAt: userCreated, signedInWith: way,
                        emailVerifiedAt: verified)
                else { return nil }
                view.session.dpopJKT = bound
                return RotationRow(expiresAt: expires, usedAt: used, spent: spent, view: view)
            }
            return nil
        }
        // The same order of questions as the SQLite store's transaction; the statement acted on the same answers.
        guard let found else { return .unknown }
        if found.view.session.revokedAt != nil { return .revoked }
        if let bound = found.view.session.dpopJKT, bound != proofKey { return .boundToAnotherKey }
        if found.usedAt != nil { return .reused(sessionID: found.view.session.id) }
        if found.expiresAt <= now { return .expired }
        guard found.spent == 1 else { return .reused(sessionID: found.view.session.id) }
        return .rotated(found.view)
    }

    private struct RotationRow: Sendable {
        let expiresAt: Int64
        let usedAt: Int64?
        let spent: Int64
        let view: SessionView
    }

    package func revokeSession(byRefreshTokenHash hash: [UInt8], now: Int64) async throws -> Bool {
        let client = client
        return try await run("revocation") {
            let rows = try await client.query(
                """
                WITH token AS (SELECT session_id FROM refresh_tokens WHERE hash = \(hash.hex)),
                     revoked AS (UPDATE sessions SET revoked_at = \(now)
                                 WHERE id IN (SELECT session_id FROM token) AND revoked_at IS NULL)
                SELECT count(*) FROM token
                """
            ).decode(Int64.self)
            for try await count in rows { return count > 0 }
            return false
        }
    }

    package func revokeSession(id: String, now: Int64) async throws -> Bool {
        let client = client
        return try await run("revocation") {
            let rows = try await client.query(
                "UPDATE sessions SET revoked_at = \(now) WHERE id = \(id) AND revoked_at IS NULL RETURNING 1"
            ).decode(Int.self)
            for try await _ in rows { return true }
            return false
        }
    }

    // MARK: Audit events

    package func appendAuditEvent(_ event: AuditEventRecord) async throws {
        try await query(
            "audit event",
            """
            INSERT INTO audit_events (time, event, user_id, document)
            VALUES (\(event.time), \(event.event), \(event.userID), \(event.document))
            """)
    }

    package func auditEvents(user: UserID?, since: Int64?, limit: Int) async throws -> [AuditEventRecord] {
        let client = client
        let owner = user?.description
        return try await run("audit list") {
            var events: [AuditEventRecord] = []
            let rows = try await client.query(
                """
                SELECT time, event, user_id, document FROM (
                    SELECT id, time, event, user_id, document FROM audit_events
                    WHERE (\(owner)::text IS NULL OR user_id = \(owner)) AND (\(since)::bigint IS NULL OR time >= \(since))
                    ORDER BY id DESC LIMIT \(limit)
                ) AS newest ORDER BY id
                """
            ).decode((Int64, String, String?, String).self)
            for try await (time, event, userID, document) in rows {
                events.append(AuditEventRecord(time: time, event: event, userID: userID, document: document))
            }
            return events
        }
    }

    @discardableResult package func purgeAuditEvents(before: Int64) async throws -> Int {
        let client = client
        return try await run("audit purge") {
            let rows = try await client.query(
                "WITH gone AS (DELETE FROM audit_events WHERE time < \(before) RETURNING 1) SELECT count(*) FROM gone"
            ).decode(Int64.self)
            for try await count in rows { return Int(count) }
            return 0
        }
    }

    // MARK: Administration

    package func users(provider: ProviderID?) async throws -> [UserStatus] {
        let client = client
        let filter = provider?.rawValue
        return try await run("user list") {
            var users: [UserStatus] = []
            let rows = try await client.query(
                """
                SELECT id, email, name, created_at, disabled_at FROM users
                WHERE \(filter)::text IS NULL OR provider = \(filter) ORDER BY created_at, id
                """
            ).decode((String, String?, String?, Int64, Int64?).self)
            for try await (id, email, name, created, disabled) in rows {
                guard let userID = UserID(id) else { continue }
                users.append(
                    UserStatus(
                        user: UserRecord(id: userID, email: email, name: name, createdAt: created),
                        disabledAt: disabled))
            }
            return users
        }
    }

    package func userStatus(id: UserID) async throws -> UserStatus? {
        let client = client
        return try await run("user lookup") {
            let rows = try await client.query(
                "SELECT email, name, created_at, disabled_at FROM users WHERE id = \(id.description)"
            ).decode((String?, String?, Int64, Int64?).self)
            for try await (email, name, created, disabled) in rows {
                return UserStatus(
                    user: UserRecord(id: id, email: email, name: name, createdAt: created), disabledAt: disabled)
            }
            return nil
        }
    }

    package func setUserDisabled(id: UserID, disabled: Bool, now: Int64) async throws -> Bool {
        let logger = logger
        return try await transaction("user disable") { connection in
            let stamp: Int64? = disabled ? now : nil
            let rows = try await connection.query(
                """
                UPDATE users SET disabled_at = CASE WHEN \(stamp)::bigint IS NULL THEN NULL
                                                    ELSE COALESCE(disabled_at, \(stamp)::bigint) END
                WHERE id = \(id.description) RETURNING 1
                """, logger: logger
            ).decode(Int.self)
            var found = false
            for try await _ in rows { found = true }
            guard found else { return false }
            if disabled {
                try await connection.query(
                    """
                    UPDATE sessions SET revoked_at = \(now) WHERE user_id = \(id.description) AND revoked_at IS NULL
                    """, logger: logger
                ).drain()
                try await Self.queueLogouts(connection, user: id.description, now: now, logger: logger)
                try await connection.query(
                    """
                    UPDATE browser_sessions SET revoked_at = \(now)
                    WHERE user_id = \(id.description) AND revoked_at IS NULL
                    """, logger: logger
                ).drain()
            }
            return true
        }
    }

    package func deleteUser(id: UserID, now: Int64) async throws -> Bool {
        let logger = logger
        return try await transaction("user deletion") { connection in
            try await Self.queueLogouts(connection, user: id.description, now: now, logger: logger)
            let rows = try await connection.query(
                "DELETE FROM users WHERE id = \(id.description) RETURNING 1", logger: logger
            ).decode(Int.self)
            for try await _ in rows { return true }
            return false
        }
    }

    package func sessions(user: UserID?) async throws -> [SessionRecord] {
        let client = client
        let filter = user?.description
        return try await run("session list") {
            var sessions: [SessionRecord] = []
            let rows = try await client.query(
                """
                SELECT id, user_id, client_id, scope, created_at, revoked_at, signed_in_with, dpop_jkt FROM sessions
                WHERE \(filter)::text IS NULL OR user_id = \(filter) ORDER BY created_at DESC, id
                """
            ).decode((String, String, String, String?, Int64, Int64?, String?, String?).self)
            for try await (id, owner, clientID, scope, created, revoked, way, bound) in rows {
                guard let userID = UserID(owner) else { continue }
                sessions.append(
                    SessionRecord(
                        id: id, userID: userID, clientID: clientID, scope: scope, createdAt: created,
                        revokedAt: revoked, signedInWith: way.flatMap(ProviderID.init(rawValue:)), dpopJKT: bound))
            }
            return sessions
        }
    }

    package func revokeSessions(user: UserID, now: Int64) async throws -> Int {
        let logger = logger
        return try await transaction("revocation") { connection in
            try await Self.queueLogouts(connection, user: user.description, now: now, logger: logger)
            let rows = try await connection.query(
                """
                WITH browsers AS (
                    UPDATE browser_sessions SET revoked_at = \(now)
                    WHERE user_id = \(user.description) AND revoked_at IS NULL
                )
                UPDATE sessions SET revoked_at = \(now)
                WHERE user_id = \(user.description) AND revoked_at IS NULL RETURNING 1
                """, logger: logger
            ).decode(Int.self)
            var count = 0
            for try await _ in rows { count += 1 }
            return count
        }
    }

    package func session(id: String) async throws -> SessionRecord? {
        let client = client
        return try await run("session lookup") {
            let rows = try await client.query(
                """
                SELECT user_id, client_id, scope, created_at, revoked_at, signed_in_with FROM sessions
                WHERE id = \(id)
                """
            ).decode((String, String, String?, Int64, Int64?, String?).self)
            for try await (user, clientID, scope, created, revoked, way) in rows {
                guard let userID = UserID(user) else { return nil }
                return SessionRecord(
                    id: id, userID: userID, clientID: clientID, scope: scope, createdAt: created, revokedAt: revoked,
                    signedInWith: way.flatMap(ProviderID.init(rawValue:)))
            }
            return nil
        }
    }

    package func sessionWithUser(id: String) async throws -> SessionView? {
        try await sessionReads.read(id) { [self] ids in
            let client = client
            return try await run("session lookup") { () -> [String: SessionView] in
                var views: [String: SessionView] = [:]
                for try await row in try await client.execute(SessionsWithUser(ids: ids)) {
                    let (id, user, clientID, scope, created, revoked, email, name, userCreated, way, verified) = row
                    views[id] = Self.sessionView(
                        id: id, user: user, clientID: clientID, scope: scope, createdAt: created,
                        revokedAt: revoked, email: email, name: name, userCreatedAt: userCreated, signedInWith: way,
                        emailVerifiedAt: verified)
                }
                return views
            }
        }
    }

    /// A session, its user and the password account's confirmation from the columns `SessionsWithUser` and
    /// `RotateRefreshToken` both read; `nil` for a stored user id that does not parse.
    private static func sessionView(
        id: String, user: String, clientID: String, scope: String?, createdAt: Int64, revokedAt: Int64?,
        email: String?, name: String?, userCreatedAt: Int64, signedInWith: String?, emailVerifiedAt: Int64?
    ) -> SessionView? {
        guard let userID = UserID(user) else { return nil }
        return SessionView(
            session: SessionRecord(
                id: id, userID: userID, clientID: clientID, scope: scope, createdAt: createdAt, revokedAt: revokedAt,
                signedInWith: signedInWith.flatMap(ProviderID.init(rawValue:))),
            user: UserRecord(id: userID, email: email, name: name, createdAt: userCreatedAt),
            emailVerifiedAt: emailVerifiedAt)
    }

    // MARK: Account recovery

    package func passwordAccount(user: UserID) async throws -> PasswordAccount? {
        let client = client
        return try await run("account lookup") {
            let rows = try await client.query(
                """
                SELECT a.email, a.password_hash, a.email_verified_at, u.email, u.name, u.created_at
                FROM password_accounts a JOIN users u ON u.id = a.user_id WHERE a.user_id = \(user.description)
                """
            ).decode((String, String, Int64?, String?, String?, Int64).self)
            for try await (email, hash, verifiedAt, userEmail, name, created) in rows {
                return PasswordAccount(
                    user: UserRecord(id: user, email: userEmail, name: name, createdAt: created),
                    email: email, passwordHash: hash, emailVerifiedAt: verifiedAt)
            }
            return nil
        }
    }

    package func createEmailLink(hash: [UInt8], user: UserID, purpose: String, expiresAt: Int64, now: Int64)
        async throws
    {
        let logger = logger
        try await transaction("mail link") { connection in
            try await connection.query(
                """
                UPDATE email_links SET used_at = \(now)
                WHERE user_id = \(user.description) AND purpose = \(purpose) AND used_at IS NULL
                """, logger: logger
            ).drain()
            try await connection.query(
                """
                INSERT INTO email_links (hash, user_id, purpose, created_at, expires_at)
                VALUES (\(hash.hex), \(user.description), \(purpose), \(now), \(expiresAt))
                """, logger: logger
            ).drain()
        }
    }

    package func emailLinkUser(hash: [UInt8], purpose: String, now: Int64) async throws -> UserRecord? {
        let client = client
        return try await run("mail link lookup") {
            let rows = try await client.query(
                """
                SELECT u.id, u.email, u.name, u.created_at FROM email_links l JOIN users u ON u.id = l.user_id
                WHERE l.hash = \(hash.hex) AND l.purpose = \(purpose) AND l.used_at IS NULL AND l.expires_at > \(now)
                """
            ).decode((String, String?, String?, Int64).self)
            for try await (id, email, name, created) in rows {
                guard let userID = UserID(id) else { return nil }
                return UserRecord(id: userID, email: email, name: name, createdAt: created)
            }
            return nil
        }
    }

    package func resetPassword(linkHash: [UInt8], passwordHash: String, now: Int64) async throws -> UserID? {
        let logger = logger
        return try await transaction("password reset") { connection in
            guard
                let owner = try await Self.spendLink(
                    linkHash, purpose: EmailLinkPurpose.reset, now: now, connection, logger),
                let user = UserID(owner)
            else { return nil }
            try await connection.query(
                """
                UPDATE email_links SET used_at = \(now)
                WHERE user_id = \(owner) AND purpose = \(EmailLinkPurpose.reset) AND used_at IS NULL
                """, logger: logger
            ).drain()
            let updated = try await connection.query(
                """
                UPDATE password_accounts SET password_hash = \(passwordHash), updated_at = \(now)
                WHERE user_id = \(owner) RETURNING 1
                """, logger: logger
            ).decode(Int.self)
            var changed = false
            for try await _ in updated { changed = true }
            guard changed else { throw StoreError.conflict("the link's user has no password account") }
            try await connection.query(
                "UPDATE sessions SET revoked_at = \(now) WHERE user_id = \(owner) AND revoked_at IS NULL",
                logger: logger
            ).drain()
            try await Self.queueLogouts(connection, user: owner, now: now, logger: logger)
            try await connection.query(
                "UPDATE browser_sessions SET revoked_at = \(now) WHERE user_id = \(owner) AND revoked_at IS NULL",
                logger: logger
            ).drain()
            return user
        }
    }

    /// Spends a live mail link of `purpose` (inside the caller's transaction) and returns its user id; spent by
    /// this UPDATE or not at all, so two requests with one link cannot both pass.
    private static func spendLink(
        _ hash: [UInt8], purpose: String, now: Int64, _ connection: PostgresConnection, _ logger: Logger
    ) async throws -> String? {
        let spent = try await connection.query(
            """
            UPDATE email_links SET used_at = \(now)
            WHERE hash = \(hash.hex) AND purpose = \(purpose) AND used_at IS NULL AND expires_at > \(now)
            RETURNING user_id
            """, logger: logger
        ).decode(String.self)
        var owner: String?
        for try await id in spent { owner = id }
        return owner
    }

    package func verifyEmail(linkHash: [UInt8], now: Int64) async throws -> UserID? {
        let logger = logger
        return try await transaction("address verification") { connection in
            guard
                let owner = try await Self.spendLink(
                    linkHash, purpose: EmailLinkPurpose.verify, now: now, connection, logger),
                let user = UserID(owner)
            else { return nil }
            try await connection.query(
                """
                UPDATE password_accounts SET email_verified_at = \(now)
                WHERE user_id = \(owner) AND email_verified_at IS NULL
                """, logger: logger
            ).drain()
            return user
        }
    }

    package func changePassword(
        user: UserID, from old: String, to new: String, keepingSession: String?, now: Int64
    ) async throws -> Bool {
        let logger = logger
        return try await transaction("password change") { connection in
            let updated = try await connection.query(
                """
                UPDATE password_accounts SET password_hash = \(new), updated_at = \(now)
                WHERE user_id = \(user.description) AND password_hash = \(old) RETURNING 1
                """, logger: logger
            ).decode(Int.self)
            var changed = false
            for try await _ in updated { changed = true }
            guard changed else { return false }
            try await connection.query(
                """
                UPDATE sessions SET revoked_at = \(now) WHERE user_id = \(user.description) AND revoked_at IS NULL
                AND id IS DISTINCT FROM \(keepingSession)
                """, logger: logger
            ).drain()
            try await Self.queueLogouts(connection, user: user.description, now: now, logger: logger)
            try await connection.query(
                """
                UPDATE browser_sessions SET revoked_at = \(now)
                WHERE user_id = \(user.description) AND revoked_at IS NULL
                """, logger: logger
            ).drain()
            try await connection.query(
                "UPDATE email_links SET used_at = \(now) WHERE user_id = \(user.description) AND used_at IS NULL",
                logger: logger
            ).drain()
            return true
        }
    }

    package func purge(expiredBefore before: Int64) async throws {
        let logger = logger
        try await transaction("purge") { connection in
            for statement: PostgresQuery in [
                "DELETE FROM refresh_tokens WHERE expires_at < \(before)",
                "DELETE FROM exchanged_tokens WHERE expires_at < \(before)",
                "DELETE FROM authorization_codes WHERE expires_at < \(before)",
                "DELETE FROM state_markers WHERE expires_at < \(before)",
                "DELETE FROM email_links WHERE expires_at < \(before)",
                "DELETE FROM device_codes WHERE expires_at < \(before)",
                "DELETE FROM app_codes WHERE expires_at < \(before)",
                "DELETE FROM browser_sessions WHERE expires_at < \(before)",
                "DELETE FROM pushed_requests WHERE expires_at < \(before)",
                "DELETE FROM rate_limits WHERE full_at < \(Double(before))",
                """
                DELETE FROM login_throttle WHERE (in_flight = 0 OR in_flight_since < \(Double(before)))
                AND blocked_until < \(Double(before)) AND last_failure < \(Double(before))
                """,
                """
                DELETE FROM sessions WHERE created_at < \(before)
                AND NOT EXISTS (SELECT 1 FROM refresh_tokens t WHERE t.session_id = sessions.id)
                """,
            ] {
                try await connection.query(statement, logger: logger).drain()
            }
        }
    }

    // MARK: Browser flow

    package func createAuthorizationCode(_ code: AuthorizationCodeRecord) async throws {
        try await query(
            "code issue",
            """
            INSERT INTO authorization_codes
                (hash, user_id, code_challenge, redirect_uri, expires_at, link_identity, signed_in_with,
                 link_session)
            VALUES (\(code.hash.hex), \(code.userID.description), \(code.codeChallenge), \(code.redirectURI),
                    \(code.expiresAt), \(code.link?.serialized), \(code.signedInWith?.rawValue),
                    \(code.linkSession))
            """)
    }

    package func redeemAuthorizationCode(hash: [UInt8], now: Int64) async throws -> CodeRedemption {
        let client = client
        return try await run("code redemption") {
            let spent = try await client.query(
                """
                UPDATE authorization_codes SET used_at = \(now) WHERE hash = \(hash.hex) AND used_at IS NULL
                RETURNING user_id, code_challenge, redirect_uri, expires_at, link_identity, signed_in_with,
                          link_session
                """
            ).decode((String, String, String, Int64, String?, String?, String?).self)
            for try await (user, challenge, redirect, expires, link, way, linkSession) in spent {
                guard let userID = UserID(user) else { return .unknown }
                return .redeemed(
                    AuthorizationCodeRecord(
                        hash: hash, userID: userID, codeChallenge: challenge, redirectURI: redirect,
                        expiresAt: expires, link: link.flatMap(IdentityRecord.init(serialized:)),
                        signedInWith: way.flatMap(ProviderID.init(rawValue:)), linkSession: linkSession))
            }
            let earlier = try await client.query(
                "SELECT session_id FROM authorization_codes WHERE hash = \(hash.hex)"
            ).decode(String?.self)
            for try await session in earlier { return .reused(sessionID: session) }
            return .unknown
        }
    }

    package func attachSession(toCode hash: [UInt8], sessionID: String) async throws {
        try await query(
            "code session", "UPDATE authorization_codes SET session_id = \(sessionID) WHERE hash = \(hash.hex)")
    }

    package func spendStateMarker(_ marker: String, expiresAt: Int64) async throws -> Bool {
        try await returnsRow(
            "state marker",
            """
            INSERT INTO state_markers (marker, expires_at) VALUES (\(marker), \(expiresAt))
            ON CONFLICT DO NOTHING RETURNING 1
            """)
    }

    package func isStateMarkerSpent(_ marker: String) async throws -> Bool {
        try await returnsRow("state marker", "SELECT 1 FROM state_markers WHERE marker = \(marker)")
    }

    /// Whether `query` returned a row (an insert that took, a delete that found, a select that matched).
    private func returnsRow(_ what: String, _ query: PostgresQuery) async throws -> Bool {
        let client = client
        return try await run(what) {
            for try await _ in try await client.query(query).decode(Int.self) { return true }
            return false
        }
    }

    // MARK: CI clients

    package func createClient(_ record: ClientRecord) async throws {
        do {
            try await query(
                "client creation",
                """
                INSERT INTO clients (name, secret_hash, scopes, trust_issuer, trust_subject, trust_audience,
                                     trust_max_age, created_at)
                VALUES (\(record.name), \(record.secretHash ?? ""), \(record.scopes.joined(separator: " ")),
                        \(record.trust?.issuer), \(record.trust?.subjectPattern), \(record.trust?.audience),
                        \(record.trust?.maxAge), \(record.createdAt))
                """)
        } catch let error as StoreError where error.code == .conflict {
            throw StoreError.conflict("a client named \(record.name) exists")
        }
    }

    package func client(name: String) async throws -> ClientRecord? {
        try await clientReads.read(name) { [self] names in
            let client = client
            return try await run("client lookup") { () -> [String: ClientRecord] in
                var records: [String: ClientRecord] = [:]
                for try await row in try await client.execute(ClientsByName(names: names)) {
                    let record = Self.client(row)
                    records[record.name] = record
                }
                return records
            }
        }
    }

    package func clients() async throws -> [ClientRecord] {
        let client = client
        return try await run("client list") {
            var records: [ClientRecord] = []
            let rows = try await client.query(
                """
                SELECT name, secret_hash, scopes, trust_issuer, trust_subject, trust_audience, trust_max_age,
                       created_at
                FROM clients ORDER BY name
                """
            ).decode(ClientsByName.Row.self)
            for try await row in rows { records.append(Self.client(row)) }
            return records
        }
    }

    package func deleteClient(name: String) async throws -> Bool {
        try await returnsRow("client deletion", "DELETE FROM clients WHERE name = \(name) RETURNING 1")
    }

    package func recordExchange(issuer: String, jti: String, expiresAt: Int64) async throws -> Bool {
        try await returnsRow(
            "token exchange",
            """
            INSERT INTO exchanged_tokens (issuer, jti, expires_at) VALUES (\(issuer), \(jti), \(expiresAt))
            ON CONFLICT DO NOTHING RETURNING 1
            """)
    }

    private static func client(_ row: ClientsByName.Row) -> ClientRecord {
        let (name, hash, scopes, issuer, subject, audience, maxAge, created) = row
        var trust: TrustPolicy?
        if let issuer, let subject {
            trust = TrustPolicy(
                issuer: issuer, subjectPattern: subject, audience: audience ?? "broker", maxAge: maxAge ?? 600)
        }
        return ClientRecord(
            name: name, secretHash: hash.isEmpty ? nil : hash, scopes: scopes.split(separator: " ").map(String.init),
            trust: trust, createdAt: created)
    }

    // MARK: Shared state

    package func signingKeys() async throws -> [StoredSigningKey] {
        let client = client
        return try await run("signing keys") {
            var keys: [StoredSigningKey] = []
            let rows = try await client.query(
                "SELECT kid, algorithm, sealed_key, created_at, retired_at FROM signing_keys ORDER BY created_at DESC, kid"
            ).decode((String, String, String, Int64, Int64?).self)
            for try await (kid, algorithm, sealed, created, retired) in rows {
                keys.append(
                    StoredSigningKey(
                        kid: kid, algorithm: algorithm, sealedKey: sealed, createdAt: created, retiredAt: retired))
            }
            return keys
        }
    }

    package func addFirstSigningKey(_ key: StoredSigningKey) async throws -> Bool {
        // The partial unique index on current keys decides between brokers starting at once.
        try await returnsRow(
            "signing key",
            """
            INSERT INTO signing_keys (kid, algorithm, sealed_key, created_at, retired_at)
            VALUES (\(key.kid), \(key.algorithm), \(key.sealedKey), \(key.createdAt), \(key.retiredAt))
            ON CONFLICT DO NOTHING RETURNING 1
            """)
    }

    package func rotateSigningKey(to key: StoredSigningKey, now: Int64, dropRetiredBefore: Int64) async throws {
        let logger = logger
        try await transaction("key rotation") { connection in
            try await connection.query("LOCK TABLE signing_keys IN SHARE ROW EXCLUSIVE MODE", logger: logger)
                .drain()
            try await connection.query(
                "UPDATE signing_keys SET retired_at = \(now) WHERE retired_at IS NULL", logger: logger
            ).drain()
            try await connection.query(
                "DELETE FROM signing_keys WHERE retired_at < \(dropRetiredBefore)", logger: logger
            ).drain()
            try await connection.query(
                """
                INSERT INTO signing_keys (kid, algorithm, sealed_key, created_at, retired_at)
                VALUES (\(key.kid), \(key.algorithm), \(key.sealedKey), \(key.createdAt), \(key.retiredAt))
                """, logger: logger
            ).drain()
        }
    }

    package func secretKey(name: String, orInsert sealed: String, now: Int64) async throws -> String {
        try await query(
            "secret key",
            """
            INSERT INTO secret_keys (name, sealed_key, created_at) VALUES (\(name), \(sealed), \(now))
            ON CONFLICT (name) DO NOTHING
            """)
        // The first writer's key, whoever that was.
        return try await secretKey(name: name) ?? sealed
    }

    package func replaceSecretKey(name: String, expected: String, with sealed: String) async throws -> Bool {
        let client = client
        return try await run("secret key rotation") {
            for try await _ in try await client.query(
                """
                UPDATE secret_keys SET sealed_key = \(sealed) WHERE name = \(name) AND sealed_key = \(expected)
                RETURNING 1
                """
            ).decode(Int.self) {
                return true
            }
            return false
        }
    }

    package func secretKey(name: String) async throws -> String? {
        let client = client
        return try await run("secret key") {
            for try await stored in try await client.query(
                "SELECT sealed_key FROM secret_keys WHERE name = \(name)"
            ).decode(String.self) {
                return stored
            }
            return nil
        }
    }

    package func rateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double, take: Bool) async throws
        -> Double?
    {
        let logger = logger
        guard take else {
            let client = client
            return try await run("rate limit") {
                let rows = try await client.query(
                    "SELECT tokens, updated_at FROM rate_limits WHERE name = \(name) AND key = \(key)")
                return bucket.step(stored: try await Self.storedBucket(rows), now: now, take: false).wait
            }
        }
        return try await transaction("rate limit") { connection in
            // The row is created full if missing, then locked: two brokers taking at once queue on it.
            try await connection.query(
                """
                INSERT INTO rate_limits (name, key, tokens, updated_at, full_at)
                VALUES (\(name), \(key), \(bucket.capacity), \(now), \(now)) ON CONFLICT (name, key) DO NOTHING
                """, logger: logger
            ).drain()
            let rows = try await connection.query(
                "SELECT tokens, updated_at FROM rate_limits WHERE name = \(name) AND key = \(key) FOR UPDATE",
                logger: logger)
            let next = bucket.step(stored: try await Self.storedBucket(rows), now: now, take: true)
            if next.wait == nil {
                try await connection.query(
                    """
                    UPDATE rate_limits SET tokens = \(next.tokens), updated_at = \(now), full_at = \(next.fullAt)
                    WHERE name = \(name) AND key = \(key)
                    """, logger: logger
                ).drain()
            }
            return next.wait
        }
    }

    package func refundRateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double) async throws {
        let logger = logger
        try await transaction("rate limit refund") { connection in
            let rows = try await connection.query(
                "SELECT tokens, updated_at FROM rate_limits WHERE name = \(name) AND key = \(key) FOR UPDATE",
                logger: logger)
            guard let next = bucket.refund(stored: try await Self.storedBucket(rows), now: now) else { return }
            try await connection.query(
                """
                UPDATE rate_limits SET tokens = \(next.tokens), updated_at = \(now), full_at = \(next.fullAt)
                WHERE name = \(name) AND key = \(key)
                """, logger: logger
            ).drain()
        }
    }

    /// The one bucket row `SELECT tokens, updated_at …` found, if any.
    private static func storedBucket(_ rows: PostgresRowSequence) async throws -> (tokens: Double, updated: Double)? {
        var stored: (tokens: Double, updated: Double)?
        for try await (tokens, updated) in rows.decode((Double, Double).self) { stored = (tokens, updated) }
        return stored
    }

    package func updateThrottle<T: Sendable>(
        keys: [String], _ body: @escaping @Sendable (inout [String: ThrottleEntry]) -> T
    ) async throws -> T {
        let logger = logger
        let sorted = Array(Set(keys)).sorted()
        return try await transaction("login throttle") { connection in
            // Rows are created (empty) and then locked in key order, so brokers never deadlock on them.
            for key in sorted {
                try await connection.query(
                    """
                    INSERT INTO login_throttle (key, failures, last_failure, blocked_until, in_flight, in_flight_since)
                    VALUES (\(key), 0, 0, 0, 0, 0) ON CONFLICT (key) DO NOTHING
                    """, logger: logger
                ).drain()
            }
            var entries: [String: ThrottleEntry] = [:]
            let rows = try await connection.query(
                """
                SELECT key, failures, last_failure, blocked_until, in_flight, in_flight_since FROM login_throttle
                WHERE key = ANY(\(sorted)) ORDER BY key FOR UPDATE
                """, logger: logger
            ).decode((String, Int, Double, Double, Int, Double).self)
            for try await (key, failures, last, blocked, inFlight, since) in rows {
                let entry = ThrottleEntry(
                    failures: failures, lastFailure: last, blockedUntil: blocked, inFlight: inFlight,
                    inFlightSince: since)
                if entry != ThrottleEntry() { entries[key] = entry }
            }
            let result = body(&entries)
            for key in sorted {
                if let entry = entries[key], entry != ThrottleEntry() {
                    try await connection.query(
                        """
                        UPDATE login_throttle SET failures = \(entry.failures), last_failure = \(entry.lastFailure),
                            blocked_until = \(entry.blockedUntil), in_flight = \(entry.inFlight),
                            in_flight_since = \(entry.inFlightSince)
                        WHERE key = \(key)
                        """, logger: logger
                    ).drain()
                } else {
                    try await connection.query("DELETE FROM login_throttle WHERE key = \(key)", logger: logger)
                        .drain()
                }
            }
            return result
        }
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
/// (reuse, RFC 9700 §4.14.2). The row answers with what was found and whether the token was spent here.
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
    private struct State {
        var continuation: CheckedContinuation<Value, any Error>?
        var pending: Result<Value, any Error>?
        var work: Task<Void, Never>?
        var release: (@Sendable () -> Void)?
    }
    private let state = Mutex(State())

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
