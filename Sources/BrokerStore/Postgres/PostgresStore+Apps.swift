package import BrokerCore
import PostgresNIO

/// The ``AppStore`` facet on PostgreSQL (schema v13), in the same order as SQLite's.
extension PostgresStore {
    package func createApp(_ app: AppRecord) async throws {
        do {
            try await query(
                "app creation",
                """
                INSERT INTO apps (client_id, secret_hash, redirect_uris, post_logout_redirect_uris,
                    backchannel_logout_uri, first_party, id_token_alg, scopes, created_at)
                VALUES (\(app.clientID), \(app.secretHash), \(AppRecord.encode(app.redirectURIs)),
                    \(AppRecord.encode(app.postLogoutRedirectURIs)), \(app.backchannelLogoutURI),
                    \(Int64(app.firstParty ? 1 : 0)), \(app.idTokenAlgorithm), \(AppRecord.encode(app.scopes)),
                    \(app.createdAt))
                """)
        } catch let error as StoreError where error.code == .conflict {
            throw StoreError.conflict("an app with this client id exists")
        }
    }

    private typealias AppRow = (String, String?, String, String, String?, Int64, String, String, Int64)
    private static func app(_ row: AppRow) -> AppRecord {
        AppRecord(
            clientID: row.0, secretHash: row.1, redirectURIs: AppRecord.decode(row.2),
            postLogoutRedirectURIs: AppRecord.decode(row.3), backchannelLogoutURI: row.4, firstParty: row.5 != 0,
            idTokenAlgorithm: row.6, scopes: AppRecord.decode(row.7), createdAt: row.8)
    }

    package func app(clientID: String) async throws -> AppRecord? {
        let client = client
        return try await run("app lookup") {
            let rows = try await client.query(
                """
                SELECT client_id, secret_hash, redirect_uris, post_logout_redirect_uris, backchannel_logout_uri,
                    first_party, id_token_alg, scopes, created_at FROM apps WHERE client_id = \(clientID)
                """
            ).decode(AppRow.self)
            for try await row in rows { return Self.app(row) }
            return nil
        }
    }

    package func apps() async throws -> [AppRecord] {
        let client = client
        return try await run("app list") {
            var apps: [AppRecord] = []
            let rows = try await client.query(
                """
                SELECT client_id, secret_hash, redirect_uris, post_logout_redirect_uris, backchannel_logout_uri,
                    first_party, id_token_alg, scopes, created_at FROM apps ORDER BY client_id
                """
            ).decode(AppRow.self)
            for try await row in rows { apps.append(Self.app(row)) }
            return apps
        }
    }

    package func deleteApp(clientID: String, now: Int64) async throws -> [String]? {
        let logger = logger
        return try await transaction("app removal") { connection in
            let gone = try await Self.first(
                Int.self,
                "WITH gone AS (DELETE FROM apps WHERE client_id = \(clientID) RETURNING 1) SELECT count(*)::int FROM gone",
                connection, logger)
            guard gone == 1 else { return nil }
            let rows = try await connection.query(
                """
                UPDATE sessions SET revoked_at = \(now) WHERE client_id = \(clientID) AND revoked_at IS NULL
                RETURNING id
                """, logger: logger
            ).decode(String.self)
            var ended: [String] = []
            for try await id in rows { ended.append(id) }
            return ended.sorted()
        }
    }

    package func createBrowserSession(_ session: BrowserSessionRecord, cookieHash: [UInt8]) async throws {
        try await query(
            "browser session",
            """
            INSERT INTO browser_sessions (id, cookie_hash, user_id, signed_in_with, auth_time, expires_at)
            VALUES (\(session.id), \(cookieHash.hex), \(session.userID.description), \(session.signedInWith.rawValue),
                \(session.authTime), \(session.expiresAt))
            """)
    }

    package func browserSession(cookieHash: [UInt8], now: Int64) async throws -> BrowserSessionRecord? {
        let client = client
        return try await run("browser session lookup") {
            let rows = try await client.query(
                """
                SELECT b.id, b.user_id, b.signed_in_with, b.auth_time, b.expires_at FROM browser_sessions b
                JOIN users u ON u.id = b.user_id
                WHERE b.cookie_hash = \(cookieHash.hex) AND b.revoked_at IS NULL AND b.expires_at > \(now)
                    AND u.disabled_at IS NULL
                """
            ).decode((String, String, String, Int64, Int64).self)
            for try await (id, user, provider, authTime, expiresAt) in rows {
                guard let user = UserID(user), let provider = ProviderID(rawValue: provider) else { return nil }
                return BrowserSessionRecord(
                    id: id, userID: user, signedInWith: provider, authTime: authTime, expiresAt: expiresAt)
            }
            return nil
        }
    }

    package func browserSessions(user: UserID?) async throws -> [BrowserSessionRecord] {
        let client = client
        let owner = user?.description
        return try await run("browser session list") {
            var sessions: [BrowserSessionRecord] = []
            let rows = try await client.query(
                """
                SELECT id, user_id, signed_in_with, auth_time, expires_at, revoked_at FROM browser_sessions
                WHERE \(owner)::text IS NULL OR user_id = \(owner) ORDER BY auth_time DESC, id
                """
            ).decode((String, String, String, Int64, Int64, Int64?).self)
            for try await (id, user, provider, authTime, expiresAt, revokedAt) in rows {
                guard let user = UserID(user), let provider = ProviderID(rawValue: provider) else { continue }
                sessions.append(
                    BrowserSessionRecord(
                        id: id, userID: user, signedInWith: provider, authTime: authTime, expiresAt: expiresAt,
                        revokedAt: revokedAt))
            }
            return sessions
        }
    }

    package func endBrowserSession(id: String, now: Int64) async throws -> [String] {
        let logger = logger
        return try await transaction("end of a browser session") { connection in
            try await connection.query(
                "UPDATE browser_sessions SET revoked_at = \(now) WHERE id = \(id) AND revoked_at IS NULL",
                logger: logger
            ).drain()
            let rows = try await connection.query(
                """
                UPDATE sessions SET revoked_at = \(now)
                WHERE revoked_at IS NULL AND id IN (
                    SELECT session_id FROM app_codes WHERE browser_session = \(id) AND session_id IS NOT NULL)
                RETURNING id
                """, logger: logger
            ).decode(String.self)
            var ended: [String] = []
            for try await session in rows { ended.append(session) }
            return ended.sorted()
        }
    }

    @discardableResult package func revokeBrowserSession(id: String, now: Int64) async throws -> Bool {
        let client = client
        return try await run("browser session revocation") {
            let rows = try await client.query(
                "UPDATE browser_sessions SET revoked_at = \(now) WHERE id = \(id) AND revoked_at IS NULL RETURNING 1"
            ).decode(Int.self)
            for try await _ in rows { return true }
            return false
        }
    }

    package func consent(user: UserID, clientID: String) async throws -> [String]? {
        let client = client
        return try await run("consent lookup") {
            let rows = try await client.query(
                "SELECT scopes FROM consents WHERE user_id = \(user.description) AND client_id = \(clientID)"
            ).decode(String.self)
            for try await scopes in rows { return scopes.split(separator: " ").map(String.init) }
            return nil
        }
    }

    package func recordConsent(user: UserID, clientID: String, scopes: [String], now: Int64) async throws {
        try await query(
            "consent",
            """
            INSERT INTO consents (user_id, client_id, scopes, granted_at)
            VALUES (\(user.description), \(clientID), \(scopes.sorted().joined(separator: " ")), \(now))
            ON CONFLICT (user_id, client_id) DO UPDATE SET scopes = excluded.scopes, granted_at = excluded.granted_at
            """)
    }

    package func refreshToken(hash: [UInt8]) async throws -> (token: RefreshTokenRecord, spent: Bool)? {
        let client = client
        return try await run("refresh token lookup") {
            let rows = try await client.query(
                "SELECT session_id, created_at, expires_at, used_at FROM refresh_tokens WHERE hash = \(hash.hex)"
            ).decode((String, Int64, Int64, Int64?).self)
            for try await (session, created, expires, used) in rows {
                return (
                    RefreshTokenRecord(hash: hash, sessionID: session, createdAt: created, expiresAt: expires),
                    used != nil
                )
            }
            return nil
        }
    }

    package func createAppCode(_ code: AppCodeRecord) async throws {
        try await query(
            "app code",
            """
            INSERT INTO app_codes (hash, client_id, user_id, redirect_uri, code_challenge, scope, nonce, auth_time,
                signed_in_with, browser_session, expires_at)
            VALUES (\(code.hash.hex), \(code.clientID), \(code.userID.description), \(code.redirectURI),
                \(code.codeChallenge), \(code.scope), \(code.nonce), \(code.authTime), \(code.signedInWith.rawValue),
                \(code.browserSession), \(code.expiresAt))
            """)
    }

    package func redeemAppCode(hash: [UInt8], now: Int64) async throws -> AppCodeRedemption {
        let logger = logger
        return try await transaction("app code redemption") { connection in
            let rows = try await connection.query(
                """
                SELECT client_id, user_id, redirect_uri, code_challenge, scope, nonce, auth_time, signed_in_with,
                    browser_session, expires_at, used_at, session_id
                FROM app_codes WHERE hash = \(hash.hex) FOR UPDATE
                """, logger: logger
            ).decode(
                (String, String, String, String?, String, String?, Int64, String, String, Int64, Int64?, String?).self
            )
            for try await row in rows {
                if row.10 != nil { return .reused(session: row.11) }
                guard row.9 > now, let user = UserID(row.1), let provider = ProviderID(rawValue: row.7) else {
                    return .unknown
                }
                try await connection.query(
                    "UPDATE app_codes SET used_at = \(now) WHERE hash = \(hash.hex)", logger: logger
                ).drain()
                return .redeemed(
                    AppCodeRecord(
                        hash: hash, clientID: row.0, userID: user, redirectURI: row.2, codeChallenge: row.3,
                        scope: row.4, nonce: row.5, authTime: row.6, signedInWith: provider, browserSession: row.8,
                        expiresAt: row.9))
            }
            return .unknown
        }
    }

    package func attachSession(_ session: String, toAppCode hash: [UInt8]) async throws {
        try await query("app code session", "UPDATE app_codes SET session_id = \(session) WHERE hash = \(hash.hex)")
    }
}
