package import BrokerCore
import GRDB

/// The ``AppStore`` facet on SQLite (schema v13).
extension SQLiteStore {
    package func createApp(_ app: AppRecord) async throws {
        do {
            try await pool.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO apps (client_id, secret_hash, redirect_uris, post_logout_redirect_uris,
                            backchannel_logout_uri, first_party, id_token_alg, scopes, created_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        app.clientID, app.secretHash, AppRecord.encode(app.redirectURIs),
                        AppRecord.encode(app.postLogoutRedirectURIs), app.backchannelLogoutURI, app.firstParty ? 1 : 0,
                        app.idTokenAlgorithm, AppRecord.encode(app.scopes), app.createdAt,
                    ])
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.conflict("an app with this client id exists")
        }
    }

    package func app(clientID: String) async throws -> AppRecord? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM apps WHERE client_id = ?", arguments: [clientID]).map(Self.app)
        }
    }

    package func apps() async throws -> [AppRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM apps ORDER BY client_id").map(Self.app)
        }
    }

    package func deleteApp(clientID: String, now: Int64) async throws -> [String]? {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM apps WHERE client_id = ?", arguments: [clientID])
            guard db.changesCount == 1 else { return nil }
            return try String.fetchAll(
                db,
                sql: "UPDATE sessions SET revoked_at = ? WHERE client_id = ? AND revoked_at IS NULL RETURNING id",
                arguments: [now, clientID]
            ).sorted()
        }
    }

    private static func app(_ row: Row) -> AppRecord {
        AppRecord(
            clientID: row["client_id"], secretHash: row["secret_hash"],
            redirectURIs: AppRecord.decode(row["redirect_uris"]),
            postLogoutRedirectURIs: AppRecord.decode(row["post_logout_redirect_uris"]),
            backchannelLogoutURI: row["backchannel_logout_uri"], firstParty: (row["first_party"] as Int64? ?? 0) != 0,
            idTokenAlgorithm: row["id_token_alg"], scopes: AppRecord.decode(row["scopes"]), createdAt: row["created_at"]
        )
    }

    package func createBrowserSession(_ session: BrowserSessionRecord, cookieHash: [UInt8]) async throws {
        try await pool.write { db in
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
        try await pool.read { db in
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
        try await pool.read { db in
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
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE browser_sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                arguments: [now, id])
            return try String.fetchAll(
                db,
                sql: """
                    UPDATE sessions SET revoked_at = ?
                    WHERE revoked_at IS NULL AND id IN (
                        SELECT session_id FROM app_codes WHERE browser_session = ? AND session_id IS NOT NULL)
                    RETURNING id
                    """,
                arguments: [now, id]
            ).sorted()
        }
    }

    @discardableResult package func revokeBrowserSession(id: String, now: Int64) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE browser_sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                arguments: [now, id])
            return db.changesCount == 1
        }
    }

    package func consent(user: UserID, clientID: String) async throws -> [String]? {
        try await pool.read { db in
            try String.fetchOne(
                db, sql: "SELECT scopes FROM consents WHERE user_id = ? AND client_id = ?",
                arguments: [user.description, clientID]
            ).map { $0.split(separator: " ").map(String.init) }
        }
    }

    package func recordConsent(user: UserID, clientID: String, scopes: [String], now: Int64) async throws {
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO consents (user_id, client_id, scopes, granted_at) VALUES (?, ?, ?, ?)
                    ON CONFLICT (user_id, client_id) DO UPDATE SET scopes = excluded.scopes,
                        granted_at = excluded.granted_at
                    """,
                arguments: [user.description, clientID, scopes.sorted().joined(separator: " "), now])
        }
    }

    package func refreshToken(hash: [UInt8]) async throws -> (token: RefreshTokenRecord, spent: Bool)? {
        try await pool.read { db in
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

    package func createAppCode(_ code: AppCodeRecord) async throws {
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO app_codes (hash, client_id, user_id, redirect_uri, code_challenge, scope, nonce,
                        auth_time, signed_in_with, browser_session, expires_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    code.hash.hex, code.clientID, code.userID.description, code.redirectURI, code.codeChallenge,
                    code.scope, code.nonce, code.authTime, code.signedInWith.rawValue, code.browserSession,
                    code.expiresAt,
                ])
        }
    }

    package func redeemAppCode(hash: [UInt8], now: Int64) async throws -> AppCodeRedemption {
        try await pool.write { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM app_codes WHERE hash = ?", arguments: [hash.hex])
            else { return .unknown }
            if (row["used_at"] as Int64?) != nil { return .reused(session: row["session_id"]) }
            guard (row["expires_at"] as Int64) > now, let user = UserID(row["user_id"] as String),
                let provider = ProviderID(rawValue: row["signed_in_with"] as String)
            else { return .unknown }
            try db.execute(sql: "UPDATE app_codes SET used_at = ? WHERE hash = ?", arguments: [now, hash.hex])
            return .redeemed(
                AppCodeRecord(
                    hash: hash, clientID: row["client_id"], userID: user, redirectURI: row["redirect_uri"],
                    codeChallenge: row["code_challenge"], scope: row["scope"], nonce: row["nonce"],
                    authTime: row["auth_time"], signedInWith: provider, browserSession: row["browser_session"],
                    expiresAt: row["expires_at"]))
        }
    }

    package func attachSession(_ session: String, toAppCode hash: [UInt8]) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE app_codes SET session_id = ? WHERE hash = ?", arguments: [session, hash.hex])
        }
    }
}
