package import BrokerCore
import GRDB

/// The ``AppStore`` facet on SQLite (schema v13).
extension SQLiteStore {
    package func createApp(_ app: AppRecord) async throws {
        do {
            try await write { db in
                try db.execute(
                    sql: """
                        INSERT INTO apps (client_id, secret_hash, redirect_uris, post_logout_redirect_uris,
                            backchannel_logout_uri, first_party, id_token_alg, scopes, created_at, require_par,
                            registration_mode, client_name, jwks, jwks_uri, pairwise_sector, userinfo_alg,
                            require_mfa)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        app.clientID, app.secretHash, AppRecord.encode(app.redirectURIs),
                        AppRecord.encode(app.postLogoutRedirectURIs), app.backchannelLogoutURI, app.firstParty ? 1 : 0,
                        app.idTokenAlgorithm, AppRecord.encode(app.scopes), app.createdAt, app.requirePAR ? 1 : 0,
                        app.registration?.mode, app.registration?.clientName, app.jwks, app.jwksURI,
                        app.pairwiseSector, app.userinfoAlgorithm, app.requireMFA ? 1 : 0,
                    ])
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.conflict("an app with this client id exists")
        }
    }

    package func saveDocumentedApp(_ app: AppRecord) async throws {
        try await write { db in
            try db.execute(
                sql: """
                    INSERT INTO apps (client_id, secret_hash, redirect_uris, post_logout_redirect_uris,
                        backchannel_logout_uri, first_party, id_token_alg, scopes, created_at, require_par,
                        registration_mode, client_name)
                    VALUES (?, NULL, ?, ?, NULL, 0, ?, '[]', ?, 0, ?, ?)
                    ON CONFLICT (client_id) DO UPDATE SET redirect_uris = excluded.redirect_uris,
                        post_logout_redirect_uris = excluded.post_logout_redirect_uris,
                        id_token_alg = excluded.id_token_alg, client_name = excluded.client_name
                    WHERE apps.registration_mode = excluded.registration_mode
                    """,
                arguments: [
                    app.clientID, AppRecord.encode(app.redirectURIs), AppRecord.encode(app.postLogoutRedirectURIs),
                    app.idTokenAlgorithm, app.createdAt, app.registration?.mode, app.registration?.clientName,
                ])
        }
    }

    package func app(clientID: String) async throws -> AppRecord? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM apps WHERE client_id = ?", arguments: [clientID]).map(Self.app)
        }
    }

    package func apps() async throws -> [AppRecord] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM apps ORDER BY client_id").map(Self.app)
        }
    }

    package func deleteApp(clientID: String, now: Int64) async throws -> [String]? {
        try await write { db in
            try db.execute(sql: "DELETE FROM apps WHERE client_id = ?", arguments: [clientID])
            guard db.changesCount == 1 else { return nil }
            // Codes name their client without a reference (the CLI's is no row): its codes go with it.
            try db.execute(sql: "DELETE FROM authorization_codes WHERE client_id = ?", arguments: [clientID])
            return try String.fetchAll(
                db,
                sql: "UPDATE sessions SET revoked_at = ? WHERE client_id = ? AND revoked_at IS NULL RETURNING id",
                arguments: [now, clientID]
            ).sorted()
        }
    }

    static func app(_ row: Row) -> AppRecord {
        AppRecord(
            clientID: row["client_id"], secretHash: row["secret_hash"],
            redirectURIs: AppRecord.decode(row["redirect_uris"]),
            postLogoutRedirectURIs: AppRecord.decode(row["post_logout_redirect_uris"]),
            backchannelLogoutURI: row["backchannel_logout_uri"], firstParty: (row["first_party"] as Int64? ?? 0) != 0,
            idTokenAlgorithm: row["id_token_alg"], scopes: AppRecord.decode(row["scopes"]),
            createdAt: row["created_at"],
            requirePAR: (row["require_par"] as Int64? ?? 0) != 0,
            registration: (row["registration_mode"] as String?).map {
                AppRecord.Registration(mode: $0, clientName: row["client_name"])
            },
            jwks: row["jwks"], jwksURI: row["jwks_uri"], pairwiseSector: row["pairwise_sector"],
            userinfoAlgorithm: row["userinfo_alg"], requireMFA: (row["require_mfa"] as Int64? ?? 0) != 0
        )
    }

    package func createBrowserSession(_ session: BrowserSessionRecord, cookieHash: [UInt8]) async throws {
        try await write { db in
            try db.execute(
                sql: """
                    INSERT INTO browser_sessions (id, cookie_hash, user_id, signed_in_with, auth_time, expires_at)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    session.id, cookieHash.hex, session.userID.description, session.signedInWith.rawValue,
                    session.authTime, session.expiresAt,
                ])
        }
    }

    package func browserSession(cookieHash: [UInt8], now: Int64) async throws -> BrowserSessionRecord? {
        try await read { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT b.id, b.user_id, b.signed_in_with, b.auth_time, b.expires_at FROM browser_sessions b
                        JOIN users u ON u.id = b.user_id
                        WHERE b.cookie_hash = ? AND b.revoked_at IS NULL AND b.expires_at > ? AND u.disabled_at IS NULL
                        """,
                    arguments: [cookieHash.hex, now]),
                let user = UserID(row["user_id"] as String),
                let provider = ProviderID(rawValue: row["signed_in_with"] as String)
            else { return nil }
            return BrowserSessionRecord(
                id: row["id"], userID: user, signedInWith: provider, authTime: row["auth_time"],
                expiresAt: row["expires_at"])
        }
    }

    package func browserSessions(user: UserID?) async throws -> [BrowserSessionRecord] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT id, user_id, signed_in_with, auth_time, expires_at, revoked_at FROM browser_sessions
                    WHERE ? IS NULL OR user_id = ? ORDER BY auth_time DESC, id
                    """,
                arguments: [user?.description, user?.description]
            ).compactMap { row in
                guard let user = UserID(row["user_id"] as String),
                    let provider = ProviderID(rawValue: row["signed_in_with"] as String)
                else { return nil }
                return BrowserSessionRecord(
                    id: row["id"], userID: user, signedInWith: provider, authTime: row["auth_time"],
                    expiresAt: row["expires_at"], revokedAt: row["revoked_at"])
            }
        }
    }

    package func endBrowserSession(id: String, now: Int64) async throws -> [String] {
        try await write { db in
            try Self.queueLogouts(db, where: "b.id = ?", [id], now: now)
            try db.execute(
                sql: "UPDATE browser_sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                arguments: [now, id])
            return try String.fetchAll(
                db,
                sql: """
                    UPDATE sessions SET revoked_at = ?
                    WHERE revoked_at IS NULL AND id IN (
                        SELECT session_id FROM app_signins WHERE browser_session = ?)
                    RETURNING id
                    """,
                arguments: [now, id]
            ).sorted()
        }
    }

    @discardableResult package func revokeBrowserSession(id: String, now: Int64) async throws -> Bool {
        try await write { db in
            try Self.queueLogouts(db, where: "b.id = ?", [id], now: now)
            try db.execute(
                sql: "UPDATE browser_sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                arguments: [now, id])
            return db.changesCount == 1
        }
    }

    package func consent(user: UserID, clientID: String) async throws -> [String]? {
        try await read { db in
            try String.fetchOne(
                db, sql: "SELECT scopes FROM consents WHERE user_id = ? AND client_id = ?",
                arguments: [user.description, clientID]
            ).map { $0.split(separator: " ").map(String.init) }
        }
    }

    package func recordConsent(user: UserID, clientID: String, scopes: [String], now: Int64) async throws {
        try await write { db in
            try db.execute(
                sql: """
                    INSERT INTO consents (user_id, client_id, scopes, granted_at) VALUES (?, ?, ?, ?)
                    ON CONFLICT (user_id, client_id) DO UPDATE SET scopes = excluded.scopes,
                        granted_at = excluded.granted_at
                    """,
                arguments: [user.description, clientID, scopes.sorted().joined(separator: " "), now])
        }
    }

    package func consents(user: UserID) async throws -> [ConsentRecord] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT client_id, scopes, granted_at FROM consents WHERE user_id = ? ORDER BY client_id",
                arguments: [user.description]
            ).map { row in
                ConsentRecord(
                    clientID: row["client_id"],
                    scopes: (row["scopes"] as String).split(separator: " ").map(String.init),
                    grantedAt: row["granted_at"])
            }
        }
    }

    package func revokeConsent(user: UserID, clientID: String, now: Int64) async throws -> [String] {
        try await write { db in
            try db.execute(
                sql: "DELETE FROM consents WHERE user_id = ? AND client_id = ?",
                arguments: [user.description, clientID])
            try db.execute(
                sql: "DELETE FROM authorization_codes WHERE user_id = ? AND client_id = ?",
                arguments: [user.description, clientID])
            return try String.fetchAll(
                db,
                sql: """
                    UPDATE sessions SET revoked_at = ? WHERE user_id = ? AND client_id = ? AND revoked_at IS NULL
                    RETURNING id
                    """,
                arguments: [now, user.description, clientID]
            ).sorted()
        }
    }

    package func refreshToken(hash: [UInt8]) async throws -> (token: RefreshTokenRecord, spent: Bool)? {
        try await read { db in
            try Row.fetchOne(
                db, sql: "SELECT session_id, created_at, expires_at, used_at FROM refresh_tokens WHERE hash = ?",
                arguments: [hash.hex]
            ).map { row in
                (
                    RefreshTokenRecord(
                        hash: hash, sessionID: row["session_id"], createdAt: row["created_at"],
                        expiresAt: row["expires_at"]),
                    (row["used_at"] as Int64?) != nil
                )
            }
        }
    }

    /// Queues a back-channel logout for every app with a `backchannel_logout_uri` that signed in through the
    /// browser sessions `condition` selects (over `browser_sessions b`) that are still live: called in the
    /// transaction that ends them, before it does.
    static func queueLogouts(
        _ db: Database, where condition: String, _ arguments: [any DatabaseValueConvertible & Sendable], now: Int64
    )
        throws
    {
        try db.execute(
            sql: """
                INSERT INTO logout_deliveries (id, client_id, subject, sid, attempts, created_at, next_attempt_at,
                    give_up_at)
                SELECT lower(hex(randomblob(16))), s.client_id, b.user_id, b.id, 0, ?, ?, ?
                FROM browser_sessions b JOIN app_signins s ON s.browser_session = b.id
                JOIN apps a ON a.client_id = s.client_id
                WHERE b.revoked_at IS NULL AND a.backchannel_logout_uri IS NOT NULL AND (\(condition))
                GROUP BY b.id, s.client_id
                """,
            arguments: StatementArguments([now, now, now + LogoutDelivery.retryFor] + arguments))
    }

    package func claimLogoutDeliveries(now: Int64, limit: Int) async throws -> [LogoutDelivery] {
        // Every broker runs this every second, mostly to find nothing: cached statements, compiled once per
        // connection rather than at each pass.
        try await write { db in
            try db.cachedStatement(
                sql: """
                    DELETE FROM logout_deliveries WHERE next_attempt_at <= ? AND client_id IN (
                        SELECT client_id FROM apps WHERE backchannel_logout_uri IS NULL)
                    """
            ).execute(arguments: [now])
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT d.*, a.backchannel_logout_uri FROM logout_deliveries d
                        JOIN apps a ON a.client_id = d.client_id
                        WHERE d.next_attempt_at <= ? ORDER BY d.next_attempt_at, d.id LIMIT ?
                        """),
                arguments: [now, limit])
            for row in rows {
                try db.execute(
                    sql: "UPDATE logout_deliveries SET next_attempt_at = ?, attempts = attempts + 1 WHERE id = ?",
                    arguments: [now + LogoutDelivery.lease, row["id"] as String])
            }
            return rows.map { row in
                LogoutDelivery(
                    id: row["id"], clientID: row["client_id"], uri: row["backchannel_logout_uri"],
                    subject: row["subject"], sid: row["sid"], attempts: row["attempts"], createdAt: row["created_at"],
                    giveUpAt: row["give_up_at"])
            }
        }
    }

    package func finishLogoutDelivery(id: String) async throws {
        try await write { db in
            try db.execute(sql: "DELETE FROM logout_deliveries WHERE id = ?", arguments: [id])
        }
    }

    package func retryLogoutDelivery(id: String, at: Int64) async throws {
        try await write { db in
            try db.execute(sql: "UPDATE logout_deliveries SET next_attempt_at = ? WHERE id = ?", arguments: [at, id])
        }
    }

    package func pendingLogoutDeliveries() async throws -> Int {
        try await read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM logout_deliveries") ?? 0 }
    }

    package func createPushedRequest(_ request: PushedRequestRecord, hash: [UInt8]) async throws {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO pushed_requests (hash, client_id, parameters, expires_at) VALUES (?, ?, ?, ?)",
                arguments: [hash.hex, request.clientID, request.parameters, request.expiresAt])
        }
    }

    package func takePushedRequest(hash: [UInt8], now: Int64) async throws -> PushedRequestRecord? {
        try await write { db in
            guard
                let row = try Row.fetchOne(
                    db, sql: "DELETE FROM pushed_requests WHERE hash = ? RETURNING client_id, parameters, expires_at",
                    arguments: [hash.hex])
            else { return nil }
            let record = PushedRequestRecord(
                clientID: row["client_id"], parameters: row["parameters"], expiresAt: row["expires_at"])
            return record.expiresAt > now ? record : nil
        }
    }
}
