package import BrokerCore
import BrokerSystem
import GRDB

/// The embedded default store: one SQLite file in the data directory, through GRDB.
///
/// WAL mode (a `DatabasePool`) lets `/auth/me` and the JWKS read while a login writes; a busy timeout
/// lets `broker client add` write from another process while the server runs.
package final class SQLiteStore: Store {
    let pool: DatabasePool
    private let lookup: SessionLookup
    package let path: String

    /// Opens (creating, mode 0600) the database at `path` and migrates it to the current schema.
    package init(path: String) throws {
        self.path = path
        lookup = SessionLookup(path: path)
        do {
            try PosixFile.createIfMissing(path, mode: 0o600)
        } catch {
            throw StoreError.unavailable("cannot create the database \(error)")
        }
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.foreignKeysEnabled = true
        configuration.label = "broker"
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
            try Self.migrate(pool)
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError.unavailable("cannot open the database \(path): \(error)")
        }
    }

    /// ``Schema/migrations`` in SQLite's dialect, recorded in `grdb_migrations` by identifier.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for migration in Schema.migrations {
            migrator.registerMigration(migration.identifier) { db in try db.execute(sql: migration.sqlite) }
        }
        return migrator
    }

    /// Applies pending migrations; refuses a database a newer broker migrated. Returns the versions applied.
    @discardableResult
    static func migrate(_ pool: DatabasePool) throws -> [Int] {
        let migrator = migrator
        let known = Set(Schema.migrations.map(\.identifier))
        let applied = try pool.read { db in try migrator.appliedIdentifiers(db) }
        let unknown = applied.subtracting(known)
        if !unknown.isEmpty {
            throw Schema.newerThanBinary(unknown.compactMap { Int($0.dropFirst().prefix { $0.isNumber }) })
        }
        try migrator.migrate(pool)
        return Schema.migrations.filter { !applied.contains($0.identifier) }.map(\.version)
    }

    package func ping() async throws {
        _ = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") }
    }

    package func schemaVersion() async throws -> Int {
        let applied = try await pool.read { db in try Self.migrator.appliedIdentifiers(db) }
        return Schema.migrations.filter { applied.contains($0.identifier) }.map(\.version).max() ?? 0
    }

    package func createPasswordAccount(user: UserRecord, email: String, passwordHash: String, verifiedAt: Int64?)
        async throws
    {
        do {
            try await pool.write { db in
                try Self.insert(user, db)
                try db.execute(
                    sql: """
                        INSERT INTO password_accounts (email, user_id, password_hash, updated_at, email_verified_at)
                        VALUES (?, ?, ?, ?, ?)
                        """,
                    arguments: [email, user.id.description, passwordHash, user.createdAt, verifiedAt]
                )
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.conflict("an account with this email exists")
        }
    }

    package func passwordAccount(email: String) async throws -> PasswordAccount? {
        try await passwordAccount(where: "a.email", is: email)
    }

    package func passwordAccount(user: UserID) async throws -> PasswordAccount? {
        try await passwordAccount(where: "a.user_id", is: user.description)
    }

    /// The password account whose `column` (one of ours, never input) is `value`.
    private func passwordAccount(where column: StaticString, is value: String) async throws -> PasswordAccount? {
        try await pool.read { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT a.email, a.password_hash, a.email_verified_at, u.id, u.email AS user_email, u.name,
                        u.created_at
                        FROM password_accounts a JOIN users u ON u.id = a.user_id WHERE \(column) = ?
                        """,
                    arguments: [value]
                ),
                let user = Self.user(row)
            else { return nil }
            return PasswordAccount(
                user: user, email: row["email"], passwordHash: row["password_hash"],
                emailVerifiedAt: row["email_verified_at"])
        }
    }

    package func updatePasswordHash(email: String, from old: String, to new: String) async throws {
        try await pool.write { db in
            // Compare-and-set: a concurrent password change wins over a rehash.
            try db.execute(
                sql: "UPDATE password_accounts SET password_hash = ?, updated_at = strftime('%s','now') "
                    + "WHERE email = ? AND password_hash = ?",
                arguments: [new, email, old]
            )
        }
    }

    package func signIn(_ identity: IdentityRecord, now: Int64) async throws -> IdentitySignIn {
        try await pool.write { db in
            let selectUser = "SELECT id, email AS user_email, name, created_at FROM users WHERE id = ?"
            if let owner = try String.fetchOne(
                db, sql: "SELECT user_id FROM identities WHERE provider = ? AND subject = ?",
                arguments: [identity.provider.rawValue, identity.subject])
            {
                try db.execute(
                    sql: "UPDATE identities SET email = ?, name = ? WHERE provider = ? AND subject = ?",
                    arguments: [identity.email, identity.name, identity.provider.rawValue, identity.subject])
                // The user's own email and name follow the identity their id was made from.
                if owner == identity.derivedUserID.description {
                    try db.execute(
                        sql: "UPDATE users SET email = ?, name = ? WHERE id = ?",
                        arguments: [identity.email, identity.name, owner])
                }
                guard let user = try Row.fetchOne(db, sql: selectUser, arguments: [owner]).flatMap(Self.user) else {
                    throw StoreError.unavailable("the identity's user \(owner) is missing")
                }
                return .user(user)
            }
            let id = identity.derivedUserID
            if try Row.fetchOne(db, sql: selectUser, arguments: [id.description]) != nil { return .unlinked(from: id) }
            let user = UserRecord(id: id, email: identity.email, name: identity.name, createdAt: now)
            try Self.insert(user, db)
            try Self.insert(identity, user: id, now: now, db)
            return .user(user)
        }
    }

    private static func insert(_ identity: IdentityRecord, user: UserID, now: Int64, _ db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO identities (provider, subject, user_id, email, name, linked_at) VALUES (?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                identity.provider.rawValue, identity.subject, user.description, identity.email, identity.name, now,
            ])
    }

    // MARK: Device authorizations

    package func createDeviceAuthorization(_ record: DeviceAuthorization, maxPending: Int, now: Int64) async throws
        -> Bool
    {
        do {
            return try await pool.write { db in
                let pending =
                    try Int.fetchOne(
                        db, sql: "SELECT COUNT(*) FROM device_codes WHERE status = ? AND expires_at > ?",
                        arguments: [DeviceStatus.pending, now]) ?? 0
                guard pending < maxPending else { return false }
                try db.execute(
                    sql: """
                        INSERT INTO device_codes (hash, user_code, client_id, provider, client_address, created_at,
                        expires_at, poll_interval, status, link_user, link_session)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        record.deviceCodeHash.hex, record.userCode, record.clientID, record.provider?.rawValue,
                        record.clientAddress, record.createdAt, record.expiresAt, record.interval, DeviceStatus.pending,
                        record.linkUser?.description, record.linkSession,
                    ])
                return true
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.conflict("the user code is in use")
        }
    }

    package func pendingDeviceAuthorization(userCode: String, now: Int64) async throws -> DeviceAuthorization? {
        try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT hash, user_code, client_id, provider, client_address, created_at, expires_at, poll_interval,
                    link_user, link_session FROM device_codes WHERE user_code = ? AND status = ? AND expires_at > ?
                    """,
                arguments: [userCode, DeviceStatus.pending, now]
            ).flatMap { row in
                guard let hash = Self.bytes(hex: row["hash"]) else { return nil }
                return DeviceAuthorization(
                    deviceCodeHash: hash, userCode: row["user_code"], clientID: row["client_id"],
                    provider: (row["provider"] as String?).flatMap(ProviderID.init(rawValue:)),
                    clientAddress: row["client_address"], createdAt: row["created_at"], expiresAt: row["expires_at"],
                    interval: row["poll_interval"], linkUser: (row["link_user"] as String?).flatMap(UserID.init),
                    linkSession: row["link_session"])
            }
        }
    }

    package func decideDeviceAuthorization(userCode: String, user: UserID?, signedInWith: ProviderID?, now: Int64)
        async throws -> Bool
    {
        try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE device_codes SET status = ?, user_id = ?, signed_in_with = ?
                    WHERE user_code = ? AND status = ? AND expires_at > ?
                    """,
                arguments: [
                    user == nil ? DeviceStatus.denied : DeviceStatus.approved, user?.description,
                    user == nil ? nil : signedInWith?.rawValue, userCode, DeviceStatus.pending, now,
                ])
            return db.changesCount == 1
        }
    }

    package func pollDeviceAuthorization(hash: [UInt8], now: Int64) async throws -> DevicePoll {
        try await pool.write { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT expires_at, poll_interval, last_polled_at, status, user_id, signed_in_with
                        FROM device_codes WHERE hash = ?
                        """,
                    arguments: [hash.hex])
            else { return .unknown }
            let status: String = row["status"]
            if status == DeviceStatus.spent { return .spent }
            if now >= (row["expires_at"] as Int64) { return .expired }
            let interval: Int64 = row["poll_interval"]
            if let last = row["last_polled_at"] as Int64?, now - last < interval - 1 {
                try db.execute(
                    sql: "UPDATE device_codes SET poll_interval = ?, last_polled_at = ? WHERE hash = ?",
                    arguments: [interval + 5, now, hash.hex])
                return .slowDown(interval: interval + 5)
            }
            switch status {
            case DeviceStatus.approved:
                guard let user = (row["user_id"] as String?).flatMap(UserID.init) else { return .denied }
                try db.execute(
                    sql: "UPDATE device_codes SET status = ?, last_polled_at = ? WHERE hash = ?",
                    arguments: [DeviceStatus.spent, now, hash.hex])
                return .approved(
                    user, signedInWith: (row["signed_in_with"] as String?).flatMap(ProviderID.init(rawValue:)))
            case DeviceStatus.denied:
                return .denied
            default:
                try db.execute(
                    sql: "UPDATE device_codes SET last_polled_at = ? WHERE hash = ?", arguments: [now, hash.hex])
                return .pending
            }
        }
    }

    /// Bytes from lowercase hex (the store's spelling of hashes).
    static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16) else {
                return nil
            }
            bytes.append(byte)
        }
        return bytes
    }

    // MARK: Linked identities

    package func identities(user: UserID) async throws -> [LinkedIdentity] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT provider, subject, email, name, linked_at FROM identities WHERE user_id = ?
                    ORDER BY linked_at, provider
                    """,
                arguments: [user.description]
            ).compactMap { row in
                guard let provider = ProviderID(rawValue: row["provider"]) else { return nil }
                return LinkedIdentity(
                    identity: IdentityRecord(
                        provider: provider, subject: row["subject"], email: row["email"], name: row["name"]),
                    userID: user, linkedAt: row["linked_at"])
            }
        }
    }

    package func identityOwner(provider: ProviderID, subject: String) async throws -> UserID? {
        try await pool.read { db in
            try String.fetchOne(
                db, sql: "SELECT user_id FROM identities WHERE provider = ? AND subject = ?",
                arguments: [provider.rawValue, subject]
            ).flatMap(UserID.init)
        }
    }

    package func linkIdentity(_ identity: IdentityRecord, to user: UserID, now: Int64) async throws -> LinkOutcome {
        try await pool.write { db in
            guard try Int.fetchOne(db, sql: "SELECT 1 FROM users WHERE id = ?", arguments: [user.description]) != nil
            else { return .userMissing }
            if let owner = try String.fetchOne(
                db, sql: "SELECT user_id FROM identities WHERE provider = ? AND subject = ?",
                arguments: [identity.provider.rawValue, identity.subject])
            {
                return owner == user.description ? .alreadyLinked : .ownedByAnotherUser
            }
            if let other = try String.fetchOne(
                db, sql: "SELECT subject FROM identities WHERE user_id = ? AND provider = ?",
                arguments: [user.description, identity.provider.rawValue])
            {
                return .providerTaken(subject: other)
            }
            // An identity unlinked from the user its id was made from may return to that user only.
            if identity.derivedUserID != user,
                try Int.fetchOne(
                    db, sql: "SELECT 1 FROM users WHERE id = ?", arguments: [identity.derivedUserID.description])
                    != nil
            {
                return .ownedByAnotherUser
            }
            try Self.insert(identity, user: user, now: now, db)
            return .linked
        }
    }

    package func addPasswordAccount(user: UserID, email: String, passwordHash: String, now: Int64) async throws
        -> PasswordLinkOutcome
    {
        try await pool.write { db in
            guard try Int.fetchOne(db, sql: "SELECT 1 FROM users WHERE id = ?", arguments: [user.description]) != nil
            else { return .userMissing }
            if try Int.fetchOne(
                db, sql: "SELECT 1 FROM password_accounts WHERE user_id = ?", arguments: [user.description]) != nil
            {
                return .alreadyHasOne
            }
            if try Int.fetchOne(db, sql: "SELECT 1 FROM password_accounts WHERE email = ?", arguments: [email]) != nil {
                return .emailTaken
            }
            try db.execute(
                sql: "INSERT INTO password_accounts (email, user_id, password_hash, updated_at) VALUES (?, ?, ?, ?)",
                arguments: [email, user.description, passwordHash, now])
            return .added
        }
    }

    package func releaseUnverifiedAddress(email: String, now: Int64) async throws -> ReleasedAddress? {
        try await pool.write { db in
            guard
                let owner = try String.fetchOne(
                    db,
                    sql: "SELECT user_id FROM password_accounts WHERE email = ? AND email_verified_at IS NULL",
                    arguments: [email]),
                let user = UserID(owner)
            else { return nil }
            try db.execute(sql: "DELETE FROM password_accounts WHERE email = ?", arguments: [email])
            try db.execute(
                sql: "UPDATE email_links SET used_at = ? WHERE user_id = ? AND used_at IS NULL",
                arguments: [now, owner])
            try db.execute(
                sql:
                    "UPDATE sessions SET revoked_at = ? WHERE user_id = ? AND signed_in_with = ? AND revoked_at IS NULL",
                arguments: [now, owner, ProviderID.custom.rawValue])
            try Self.queueLogouts(
                db, where: "b.user_id = ? AND b.signed_in_with = ?", [owner, ProviderID.custom.rawValue], now: now)
            try db.execute(
                sql: """
                    UPDATE browser_sessions SET revoked_at = ?
                    WHERE user_id = ? AND signed_in_with = ? AND revoked_at IS NULL
                    """,
                arguments: [now, owner, ProviderID.custom.rawValue])
            let others =
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM identities WHERE user_id = ?", arguments: [owner]) ?? 0
            if others == 0 { try db.execute(sql: "DELETE FROM users WHERE id = ?", arguments: [owner]) }
            return ReleasedAddress(user: user, userDeleted: others == 0)
        }
    }

    package func unlinkIdentity(user: UserID, provider: ProviderID, now: Int64) async throws -> UnlinkOutcome {
        try await pool.write { db in
            let identities =
                try Int.fetchOne(
                    db, sql: "SELECT COUNT(*) FROM identities WHERE user_id = ?", arguments: [user.description]) ?? 0
            let passwords =
                try Int.fetchOne(
                    db, sql: "SELECT COUNT(*) FROM password_accounts WHERE user_id = ?", arguments: [user.description])
                ?? 0
            let has: Bool
            if provider == .custom {
                has = passwords > 0
            } else {
                has =
                    try Int.fetchOne(
                        db, sql: "SELECT 1 FROM identities WHERE user_id = ? AND provider = ?",
                        arguments: [user.description, provider.rawValue]) != nil
            }
            guard has else { return .notLinked }
            guard identities + passwords > 1 else { return .lastWayIn }
            if provider == .custom {
                try db.execute(sql: "DELETE FROM password_accounts WHERE user_id = ?", arguments: [user.description])
                try db.execute(
                    sql: "UPDATE email_links SET used_at = ? WHERE user_id = ? AND used_at IS NULL",
                    arguments: [now, user.description])
            } else {
                try db.execute(
                    sql: "DELETE FROM identities WHERE user_id = ? AND provider = ?",
                    arguments: [user.description, provider.rawValue])
            }
            let ended = try String.fetchAll(
                db,
                sql: """
                    UPDATE sessions SET revoked_at = ?
                    WHERE user_id = ? AND signed_in_with = ? AND revoked_at IS NULL RETURNING id
                    """,
                arguments: [now, user.description, provider.rawValue])
            try Self.queueLogouts(
                db, where: "b.user_id = ? AND b.signed_in_with = ?", [user.description, provider.rawValue], now: now)
            try db.execute(
                sql: """
                    UPDATE browser_sessions SET revoked_at = ?
                    WHERE user_id = ? AND signed_in_with = ? AND revoked_at IS NULL
                    """,
                arguments: [now, user.description, provider.rawValue])
            return .unlinked(endedSessions: ended.sorted())
        }
    }

    package func user(id: UserID) async throws -> UserRecord? {
        try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: "SELECT id, email AS user_email, name, created_at FROM users WHERE id = ?",
                arguments: [id.description]
            ).flatMap(Self.user)
        }
    }

    package func createSession(_ session: SessionRecord, firstToken: RefreshTokenRecord) async throws {
        try await pool.write { db in
            // Writes are serialized: no disable can slip between this check and the insert.
            let user = try Row.fetchOne(
                db, sql: "SELECT disabled_at FROM users WHERE id = ?", arguments: [session.userID.description])
            if let user, (user["disabled_at"] as Int64?) != nil {
                throw StoreError(code: .disabled, reason: "the user is disabled")
            }
            try db.execute(
                sql: """
                    INSERT INTO sessions (id, user_id, client_id, scope, created_at, signed_in_with, dpop_jkt)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    session.id, session.userID.description, session.clientID, session.scope, session.createdAt,
                    session.signedInWith?.rawValue, session.dpopJKT,
                ]
            )
            try db.execute(
                sql: "INSERT INTO refresh_tokens (hash, session_id, created_at, expires_at) VALUES (?, ?, ?, ?)",
                arguments: [firstToken.hash.hex, session.id, firstToken.createdAt, firstToken.expiresAt]
            )
        }
    }

    package func rotateRefreshToken(
        hash: [UInt8],
        nextHash: [UInt8],
        nextExpiresAt: Int64,
        now: Int64,
        proofKey: String?
    ) async throws -> RotationOutcome {
        // Cached statements: the hot path's SQL is compiled once per connection, not on every rotation (GRDB
        // compiles a plain `sql:` string each time, with an authorizer callback per column it reads).
        try await pool.write { db in
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(
                        sql: """
                            SELECT t.expires_at, t.used_at, s.id, s.user_id, s.client_id, s.scope, s.created_at,
                                   s.revoked_at, s.signed_in_with, s.dpop_jkt, u.email AS user_email, u.name,
                                   u.created_at AS user_created_at,
                                   a.email_verified_at
                            FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id
                            JOIN users u ON u.id = s.user_id LEFT JOIN password_accounts a ON a.user_id = u.id
                            WHERE t.hash = ?
                            """),
                    arguments: [hash.hex]
                ),
                let session = Self.session(row)
            else { return .unknown }
            let user = UserRecord(
                id: session.userID, email: row["user_email"], name: row["name"], createdAt: row["user_created_at"])
            if session.revokedAt != nil { return .revoked }
            if let bound = session.dpopJKT, bound != proofKey { return .boundToAnotherKey }
            if (row["used_at"] as Int64?) != nil {
                try db.cachedStatement(sql: "UPDATE sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL")
                    .execute(arguments: [now, session.id])
                return .reused(sessionID: session.id)
            }
            if (row["expires_at"] as Int64) <= now { return .expired }
            try db.cachedStatement(sql: "UPDATE refresh_tokens SET used_at = ? WHERE hash = ? AND used_at IS NULL")
                .execute(arguments: [now, hash.hex])
            // SQLite serialises writers, so this cannot race; the check keeps the invariant explicit.
            guard db.changesCount == 1 else { return .reused(sessionID: session.id) }
            try db.cachedStatement(
                sql: "INSERT INTO refresh_tokens (hash, session_id, created_at, expires_at) VALUES (?, ?, ?, ?)"
            ).execute(arguments: [nextHash.hex, session.id, now, nextExpiresAt])
            return .rotated(
                SessionView(session: session, user: user, emailVerifiedAt: row["email_verified_at"] as Int64?))
        }
    }

    package func revokeSession(byRefreshTokenHash hash: [UInt8], now: Int64) async throws -> Bool {
        try await pool.write { db in
            guard
                let sessionID = try String.fetchOne(
                    db,
                    sql: "SELECT session_id FROM refresh_tokens WHERE hash = ?",
                    arguments: [hash.hex]
                )
            else { return false }
            try db.execute(
                sql: "UPDATE sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                arguments: [now, sessionID]
            )
            return true
        }
    }

    package func revokeSession(id: String, now: Int64) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                arguments: [now, id]
            )
            return db.changesCount == 1
        }
    }

    package func session(id: String) async throws -> SessionRecord? {
        try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT id, user_id, client_id, scope, created_at, revoked_at, signed_in_with FROM sessions
                    WHERE id = ?
                    """,
                arguments: [id]
            ).flatMap(Self.session)
        }
    }

    /// Answered by ``SessionLookup`` on the caller's thread: the hot path of every `/auth/me`.
    package func sessionWithUser(id: String) async throws -> SessionView? {
        try lookup.sessionWithUser(id: id)
    }

    package func purge(expiredBefore before: Int64) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM refresh_tokens WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM exchanged_tokens WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM authorization_codes WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM state_markers WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM email_links WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM device_codes WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM app_codes WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM browser_sessions WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM pushed_requests WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM rate_limits WHERE full_at < ?", arguments: [Double(before)])
            try db.execute(
                sql: "DELETE FROM login_throttle WHERE in_flight = 0 AND blocked_until < ? AND last_failure < ?",
                arguments: [Double(before), Double(before)])
            try db.execute(
                sql: """
                    DELETE FROM sessions WHERE created_at < ?
                    AND NOT EXISTS (SELECT 1 FROM refresh_tokens t WHERE t.session_id = sessions.id)
                    """,
                arguments: [before]
            )
        }
    }

    // MARK: Browser flow

    package func createAuthorizationCode(_ code: AuthorizationCodeRecord) async throws {
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO authorization_codes
                    (hash, user_id, code_challenge, redirect_uri, expires_at, link_identity, signed_in_with,
                     link_session)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    code.hash.hex, code.userID.description, code.codeChallenge, code.redirectURI, code.expiresAt,
                    code.link?.serialized, code.signedInWith?.rawValue, code.linkSession,
                ]
            )
        }
    }

    package func redeemAuthorizationCode(hash: [UInt8], now: Int64) async throws -> CodeRedemption {
        try await pool.write { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT user_id, code_challenge, redirect_uri, expires_at, used_at, session_id, link_identity,
                               signed_in_with, link_session
                        FROM authorization_codes WHERE hash = ?
                        """,
                    arguments: [hash.hex]
                ),
                let user = UserID(row["user_id"] as String)
            else { return .unknown }
            if (row["used_at"] as Int64?) != nil { return .reused(sessionID: row["session_id"]) }
            try db.execute(
                sql: "UPDATE authorization_codes SET used_at = ? WHERE hash = ? AND used_at IS NULL",
                arguments: [now, hash.hex]
            )
            return .redeemed(
                AuthorizationCodeRecord(
                    hash: hash,
                    userID: user,
                    codeChallenge: row["code_challenge"],
                    redirectURI: row["redirect_uri"],
                    expiresAt: row["expires_at"],
                    link: (row["link_identity"] as String?).flatMap(IdentityRecord.init(serialized:)),
                    signedInWith: (row["signed_in_with"] as String?).flatMap(ProviderID.init(rawValue:)),
                    linkSession: row["link_session"]
                )
            )
        }
    }

    package func attachSession(toCode hash: [UInt8], sessionID: String) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE authorization_codes SET session_id = ? WHERE hash = ?",
                arguments: [sessionID, hash.hex]
            )
        }
    }

    package func isStateMarkerSpent(_ marker: String) async throws -> Bool {
        try await pool.read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM state_markers WHERE marker = ?", arguments: [marker]) ?? false
        }
    }

    package func spendStateMarker(_ marker: String, expiresAt: Int64) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "INSERT INTO state_markers (marker, expires_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                arguments: [marker, expiresAt]
            )
            return db.changesCount == 1
        }
    }

    // MARK: CI clients

    package func createClient(_ client: ClientRecord) async throws {
        do {
            try await pool.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO clients (name, secret_hash, scopes, trust_issuer, trust_subject, trust_audience,
                                             trust_max_age, created_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        // "" stands for "no secret" (the column predates secretless clients; a keyed hash is
                        // never empty).
                        client.name, client.secretHash ?? "", client.scopes.joined(separator: " "),
                        client.trust?.issuer,
                        client.trust?.subjectPattern, client.trust?.audience, client.trust?.maxAge, client.createdAt,
                    ]
                )
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.conflict("a client named \(client.name) exists")
        }
    }

    static let clientColumns =
        "name, secret_hash, scopes, trust_issuer, trust_subject, trust_audience, trust_max_age, created_at"

    /// Answered by ``SessionLookup`` on the caller's thread: read on every CI mint.
    package func client(name: String) async throws -> ClientRecord? {
        try lookup.client(name: name)
    }

    package func clients() async throws -> [ClientRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT \(Self.clientColumns) FROM clients ORDER BY name").map(Self.client)
        }
    }

    package func deleteClient(name: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM clients WHERE name = ?", arguments: [name])
            return db.changesCount == 1
        }
    }

    package func recordExchange(issuer: String, jti: String, expiresAt: Int64) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "INSERT INTO exchanged_tokens (issuer, jti, expires_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                arguments: [issuer, jti, expiresAt]
            )
            return db.changesCount == 1
        }
    }

    // MARK: Shared state

    package func signingKeys() async throws -> [StoredSigningKey] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT kid, algorithm, sealed_key, created_at, retired_at FROM signing_keys "
                    + "ORDER BY created_at DESC, kid"
            ).map {
                StoredSigningKey(
                    kid: $0["kid"], algorithm: $0["algorithm"], sealedKey: $0["sealed_key"],
                    createdAt: $0["created_at"], retiredAt: $0["retired_at"])
            }
        }
    }

    package func addFirstSigningKey(_ key: StoredSigningKey) async throws -> Bool {
        try await pool.write { db in
            guard try Int.fetchOne(db, sql: "SELECT 1 FROM signing_keys WHERE retired_at IS NULL") == nil else {
                return false
            }
            try Self.insert(key, db)
            return true
        }
    }

    package func rotateSigningKey(to key: StoredSigningKey, now: Int64, dropRetiredBefore: Int64) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE signing_keys SET retired_at = ? WHERE retired_at IS NULL", arguments: [now])
            try db.execute(sql: "DELETE FROM signing_keys WHERE retired_at < ?", arguments: [dropRetiredBefore])
            try Self.insert(key, db)
        }
    }

    private static func insert(_ key: StoredSigningKey, _ db: Database) throws {
        try db.execute(
            sql: "INSERT INTO signing_keys (kid, algorithm, sealed_key, created_at, retired_at) VALUES (?, ?, ?, ?, ?)",
            arguments: [key.kid, key.algorithm, key.sealedKey, key.createdAt, key.retiredAt]
        )
    }

    package func secretKey(name: String, orInsert sealed: String, now: Int64) async throws -> String {
        try await pool.write { db in
            try db.execute(
                sql: "INSERT INTO secret_keys (name, sealed_key, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                arguments: [name, sealed, now]
            )
            return try String.fetchOne(db, sql: "SELECT sealed_key FROM secret_keys WHERE name = ?", arguments: [name])
                ?? sealed
        }
    }

    package func replaceSecretKey(name: String, expected: String, with sealed: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE secret_keys SET sealed_key = ? WHERE name = ? AND sealed_key = ?",
                arguments: [sealed, name, expected])
            return db.changesCount == 1
        }
    }

    package func secretKey(name: String) async throws -> String? {
        try await pool.read { db in
            try String.fetchOne(db, sql: "SELECT sealed_key FROM secret_keys WHERE name = ?", arguments: [name])
        }
    }

    package func rateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double, take: Bool) async throws
        -> Double?
    {
        // Looking needs no write transaction.
        guard take else {
            return try await pool.read { db in
                bucket.step(stored: try Self.storedBucket(db, name, key), now: now, take: false).wait
            }
        }
        return try await pool.write { db in
            let next = bucket.step(stored: try Self.storedBucket(db, name, key), now: now, take: true)
            if next.wait == nil {
                try db.execute(
                    sql: """
                        INSERT INTO rate_limits (name, key, tokens, updated_at, full_at) VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT(name, key) DO UPDATE SET tokens = excluded.tokens,
                            updated_at = excluded.updated_at, full_at = excluded.full_at
                        """,
                    arguments: [name, key, next.tokens, now, next.fullAt])
            }
            return next.wait
        }
    }

    package func refundRateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double) async throws {
        try await pool.write { db in
            guard let next = bucket.refund(stored: try Self.storedBucket(db, name, key), now: now) else { return }
            try db.execute(
                sql: "UPDATE rate_limits SET tokens = ?, updated_at = ?, full_at = ? WHERE name = ? AND key = ?",
                arguments: [next.tokens, now, next.fullAt, name, key])
        }
    }

    private static func storedBucket(_ db: Database, _ name: String, _ key: String) throws
        -> (tokens: Double, updated: Double)?
    {
        try Row.fetchOne(
            db, sql: "SELECT tokens, updated_at FROM rate_limits WHERE name = ? AND key = ?", arguments: [name, key]
        ).map { (tokens: $0["tokens"] as Double, updated: $0["updated_at"] as Double) }
    }

    package func updateThrottle<T: Sendable>(
        keys: [String], _ body: @escaping @Sendable (inout [String: ThrottleEntry]) -> T
    ) async throws -> T {
        try await pool.write { db in
            var entries: [String: ThrottleEntry] = [:]
            for key in keys {
                if let row = try Row.fetchOne(
                    db,
                    sql: "SELECT failures, last_failure, blocked_until, in_flight, in_flight_since "
                        + "FROM login_throttle WHERE key = ?",
                    arguments: [key])
                {
                    entries[key] = ThrottleEntry(
                        failures: row["failures"], lastFailure: row["last_failure"],
                        blockedUntil: row["blocked_until"], inFlight: row["in_flight"],
                        inFlightSince: row["in_flight_since"])
                }
            }
            let result = body(&entries)
            for key in keys {
                if let entry = entries[key] {
                    try db.execute(
                        sql: """
                            INSERT INTO login_throttle
                                (key, failures, last_failure, blocked_until, in_flight, in_flight_since)
                            VALUES (?, ?, ?, ?, ?, ?)
                            ON CONFLICT(key) DO UPDATE SET failures = excluded.failures,
                                last_failure = excluded.last_failure, blocked_until = excluded.blocked_until,
                                in_flight = excluded.in_flight, in_flight_since = excluded.in_flight_since
                            """,
                        arguments: [
                            key, entry.failures, entry.lastFailure, entry.blockedUntil, entry.inFlight,
                            entry.inFlightSince,
                        ])
                } else {
                    try db.execute(sql: "DELETE FROM login_throttle WHERE key = ?", arguments: [key])
                }
            }
            return result
        }
    }

    private static func client(_ row: Row) -> ClientRecord {
        var trust: TrustPolicy?
        if let issuer: String = row["trust_issuer"], let subject: String = row["trust_subject"] {
            trust = TrustPolicy(
                issuer: issuer,
                subjectPattern: subject,
                audience: row["trust_audience"] ?? "broker",
                maxAge: row["trust_max_age"] ?? 600
            )
        }
        let scopes: String = row["scopes"]
        return ClientRecord(
            name: row["name"],
            secretHash: (row["secret_hash"] as String?).flatMap { $0.isEmpty ? nil : $0 },
            scopes: scopes.split(separator: " ").map(String.init),
            trust: trust,
            createdAt: row["created_at"]
        )
    }

    private static func insert(_ user: UserRecord, _ db: Database) throws {
        try db.execute(
            sql: "INSERT INTO users (id, provider, subject, email, name, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            arguments: [
                user.id.description, user.id.provider.rawValue, user.id.subject, user.email, user.name,
                user.createdAt,
            ]
        )
    }

    // MARK: Audit events

    package func appendAuditEvent(_ event: AuditEventRecord) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "INSERT INTO audit_events (time, event, user_id, document) VALUES (?, ?, ?, ?)",
                arguments: [event.time, event.event, event.userID, event.document])
        }
    }

    package func auditEvents(user: UserID?, since: Int64?, limit: Int) async throws -> [AuditEventRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT time, event, user_id, document FROM (
                        SELECT id, time, event, user_id, document FROM audit_events
                        WHERE (? IS NULL OR user_id = ?) AND (? IS NULL OR time >= ?)
                        ORDER BY id DESC LIMIT ?
                    ) ORDER BY id
                    """,
                arguments: [user?.description, user?.description, since, since, limit]
            ).map { row in
                AuditEventRecord(
                    time: row["time"], event: row["event"], userID: row["user_id"], document: row["document"])
            }
        }
    }

    @discardableResult package func purgeAuditEvents(before: Int64) async throws -> Int {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM audit_events WHERE time < ?", arguments: [before])
            return db.changesCount
        }
    }

    // MARK: Administration

    package func users(provider: ProviderID?) async throws -> [UserStatus] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT id, email AS user_email, name, created_at, disabled_at FROM users
                    WHERE ? IS NULL OR provider = ? ORDER BY created_at, id
                    """,
                arguments: [provider?.rawValue, provider?.rawValue]
            ).compactMap { row in Self.user(row).map { UserStatus(user: $0, disabledAt: row["disabled_at"]) } }
        }
    }

    package func userStatus(id: UserID) async throws -> UserStatus? {
        try await pool.read { db in
            try Row.fetchOne(
                db, sql: "SELECT id, email AS user_email, name, created_at, disabled_at FROM users WHERE id = ?",
                arguments: [id.description]
            ).flatMap { row in Self.user(row).map { UserStatus(user: $0, disabledAt: row["disabled_at"]) } }
        }
    }

    package func setUserDisabled(id: UserID, disabled: Bool, now: Int64) async throws -> Bool {
        try await pool.write { db in
            if disabled {
                try db.execute(
                    sql: "UPDATE users SET disabled_at = COALESCE(disabled_at, ?) WHERE id = ?",
                    arguments: [now, id.description])
            } else {
                try db.execute(sql: "UPDATE users SET disabled_at = NULL WHERE id = ?", arguments: [id.description])
            }
            guard db.changesCount == 1 else { return false }
            if disabled {
                try db.execute(
                    sql: "UPDATE sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL",
                    arguments: [now, id.description])
                try Self.queueLogouts(db, where: "b.user_id = ?", [id.description], now: now)
                try db.execute(
                    sql: "UPDATE browser_sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL",
                    arguments: [now, id.description])
            }
            return true
        }
    }

    package func deleteUser(id: UserID, now: Int64) async throws -> Bool {
        try await pool.write { db in
            try Self.queueLogouts(db, where: "b.user_id = ?", [id.description], now: now)
            try db.execute(sql: "DELETE FROM users WHERE id = ?", arguments: [id.description])
            return db.changesCount == 1
        }
    }

    package func sessions(user: UserID?) async throws -> [SessionRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT id, user_id, client_id, scope, created_at, revoked_at, signed_in_with, dpop_jkt FROM sessions
                    WHERE ? IS NULL OR user_id = ? ORDER BY created_at DESC, id
                    """,
                arguments: [user?.description, user?.description]
            ).compactMap(Self.session)
        }
    }

    package func revokeSessions(user: UserID, now: Int64) async throws -> Int {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL",
                arguments: [now, user.description])
            let count = db.changesCount
            // The broker's own browser sign-ins end with them (apps then ask the person to sign in again).
            try Self.queueLogouts(db, where: "b.user_id = ?", [user.description], now: now)
            try db.execute(
                sql: "UPDATE browser_sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL",
                arguments: [now, user.description])
            return count
        }
    }

    // MARK: Account recovery

    package func createEmailLink(hash: [UInt8], user: UserID, purpose: String, expiresAt: Int64, now: Int64)
        async throws
    {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE email_links SET used_at = ? WHERE user_id = ? AND purpose = ? AND used_at IS NULL",
                arguments: [now, user.description, purpose])
            try db.execute(
                sql: """
                    INSERT INTO email_links (hash, user_id, purpose, created_at, expires_at) VALUES (?, ?, ?, ?, ?)
                    """,
                arguments: [hash.hex, user.description, purpose, now, expiresAt])
        }
    }

    package func emailLinkUser(hash: [UInt8], purpose: String, now: Int64) async throws -> UserRecord? {
        try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT u.id, u.email AS user_email, u.name, u.created_at FROM email_links l
                    JOIN users u ON u.id = l.user_id
                    WHERE l.hash = ? AND l.purpose = ? AND l.used_at IS NULL AND l.expires_at > ?
                    """,
                arguments: [hash.hex, purpose, now]
            ).flatMap(Self.user)
        }
    }

    package func resetPassword(linkHash: [UInt8], passwordHash: String, now: Int64) async throws -> UserID? {
        try await pool.write { db in
            guard
                let owner = try String.fetchOne(
                    db,
                    sql: """
                        SELECT user_id FROM email_links
                        WHERE hash = ? AND purpose = ? AND used_at IS NULL AND expires_at > ?
                        """,
                    arguments: [linkHash.hex, EmailLinkPurpose.reset, now]),
                let user = UserID(owner)
            else { return nil }
            try db.execute(
                sql: "UPDATE email_links SET used_at = ? WHERE user_id = ? AND purpose = ? AND used_at IS NULL",
                arguments: [now, owner, EmailLinkPurpose.reset])
            try db.execute(
                sql: "UPDATE password_accounts SET password_hash = ?, updated_at = ? WHERE user_id = ?",
                arguments: [passwordHash, now, owner])
            guard db.changesCount == 1 else { return nil }
            try db.execute(
                sql: "UPDATE sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL",
                arguments: [now, owner])
            try Self.queueLogouts(db, where: "b.user_id = ?", [owner], now: now)
            try db.execute(
                sql: "UPDATE browser_sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL",
                arguments: [now, owner])
            return user
        }
    }

    package func verifyEmail(linkHash: [UInt8], now: Int64) async throws -> UserID? {
        try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE email_links SET used_at = ?
                    WHERE hash = ? AND purpose = ? AND used_at IS NULL AND expires_at > ?
                    """,
                arguments: [now, linkHash.hex, EmailLinkPurpose.verify, now])
            guard db.changesCount == 1,
                let owner = try String.fetchOne(
                    db, sql: "SELECT user_id FROM email_links WHERE hash = ?", arguments: [linkHash.hex]),
                let user = UserID(owner)
            else { return nil }
            try db.execute(
                sql:
                    "UPDATE password_accounts SET email_verified_at = ? WHERE user_id = ? AND email_verified_at IS NULL",
                arguments: [now, owner])
            return user
        }
    }

    package func changePassword(
        user: UserID, from old: String, to new: String, keepingSession: String?, now: Int64
    ) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql:
                    "UPDATE password_accounts SET password_hash = ?, updated_at = ? WHERE user_id = ? AND password_hash = ?",
                arguments: [new, now, user.description, old])
            guard db.changesCount == 1 else { return false }
            try db.execute(
                sql: "UPDATE sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL AND id IS NOT ?",
                arguments: [now, user.description, keepingSession])
            try Self.queueLogouts(db, where: "b.user_id = ?", [user.description], now: now)
            try db.execute(
                sql: "UPDATE browser_sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL",
                arguments: [now, user.description])
            // Reset links sent before the change must not undo it.
            try db.execute(
                sql: "UPDATE email_links SET used_at = ? WHERE user_id = ? AND used_at IS NULL",
                arguments: [now, user.description])
            return true
        }
    }

    private static func user(_ row: Row) -> UserRecord? {
        guard let id = UserID(row["id"] as String) else { return nil }
        return UserRecord(id: id, email: row["user_email"], name: row["name"], createdAt: row["created_at"])
    }

    private static func session(_ row: Row) -> SessionRecord? {
        guard let userID = UserID(row["user_id"] as String) else { return nil }
        return SessionRecord(
            id: row["id"],
            userID: userID,
            clientID: row["client_id"],
            scope: row["scope"],
            createdAt: row["created_at"],
            revokedAt: row["revoked_at"],
            signedInWith: (row["signed_in_with"] as String?).flatMap(ProviderID.init(rawValue:)),
            dpopJKT: row.hasColumn("dpop_jkt") ? row["dpop_jkt"] : nil
        )
    }
}

extension [UInt8] {
    /// Lowercase hex, the form hashes are stored in.
    var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(count * 2)
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of lowercase or uppercase hex; `nil` for anything else.
    init?(hex: String) {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case 0x30...0x39: digit - 0x30
            case 0x61...0x66: digit - 0x61 + 10
            case 0x41...0x46: digit - 0x41 + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        self = bytes
    }
}

extension SQLiteStore {
    package func exportRows(_ table: Schema.Table) async throws -> [[StoreValue]] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT \(table.columnList) FROM \(table.name)").map { row in
                table.columns.enumerated().map { index, column -> StoreValue in
                    switch column.kind {
                    case .integer: (row[index] as Int64?).map(StoreValue.integer) ?? .null
                    case .text: (row[index] as String?).map(StoreValue.text) ?? .null
                    }
                }
            }
        }
    }

    package func importRows(_ tables: [(Schema.Table, [[StoreValue]])]) async throws {
        try await pool.write { db in
            for (table, rows) in tables {
                let marks = Array(repeating: "?", count: table.columns.count).joined(separator: ", ")
                let statement = try db.makeStatement(
                    sql: "INSERT INTO \(table.name) (\(table.columnList)) VALUES (\(marks))")
                for row in rows {
                    let values: [(any DatabaseValueConvertible)?] = row.map { value in
                        switch value {
                        case .null: nil
                        case .integer(let number): number
                        case .text(let text): text
                        }
                    }
                    try statement.execute(arguments: StatementArguments(values))
                }
            }
        }
    }

    package func count(_ table: Schema.Table) async throws -> Int {
        try await pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM \(table.name)") ?? 0 }
    }
}
