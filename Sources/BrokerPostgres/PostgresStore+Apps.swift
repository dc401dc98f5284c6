package import BrokerCore
package import BrokerStore
import Logging
import PostgresNIO

/// The ``AppStore`` facet on PostgreSQL (schema v13), in the same order as SQLite's.
extension PostgresStore {
    package func createApp(_ app: AppRecord) async throws {
        do {
            try await query(
                "app creation",
                """
                INSERT INTO apps (client_id, secret_hash, redirect_uris, post_logout_redirect_uris,
                    backchannel_logout_uri, first_party, id_token_alg, scopes, created_at, require_par,
                    registration_mode, client_name, jwks, jwks_uri, pairwise_sector, userinfo_alg, require_mfa)
                VALUES (\(app.clientID), \(app.secretHash), \(AppRecord.encode(app.redirectURIs)),
                    \(AppRecord.encode(app.postLogoutRedirectURIs)), \(app.backchannelLogoutURI),
                    \(Int64(app.firstParty ? 1 : 0)), \(app.idTokenAlgorithm), \(AppRecord.encode(app.scopes)),
                    \(app.createdAt), \(Int64(app.requirePAR ? 1 : 0)), \(app.registration?.mode),
                    \(app.registration?.clientName), \(app.jwks), \(app.jwksURI),
                    \(app.pairwiseSector), \(app.userinfoAlgorithm), \(Int64(app.requireMFA ? 1 : 0)))
                """)
        } catch let error as StoreError where error.code == .conflict {
            throw StoreError.conflict("an app with this client id exists")
        }
    }

    package func saveDocumentedApp(_ app: AppRecord) async throws {
        try await query(
            "documented app",
            """
            INSERT INTO apps (client_id, secret_hash, redirect_uris, post_logout_redirect_uris,
                backchannel_logout_uri, first_party, id_token_alg, scopes, created_at, require_par,
                registration_mode, client_name)
            VALUES (\(app.clientID), NULL, \(AppRecord.encode(app.redirectURIs)),
                \(AppRecord.encode(app.postLogoutRedirectURIs)), NULL, 0, \(app.idTokenAlgorithm), '[]',
                \(app.createdAt), 0, \(app.registration?.mode), \(app.registration?.clientName))
            ON CONFLICT (client_id) DO UPDATE SET redirect_uris = excluded.redirect_uris,
                post_logout_redirect_uris = excluded.post_logout_redirect_uris,
                id_token_alg = excluded.id_token_alg, client_name = excluded.client_name
            WHERE apps.registration_mode = excluded.registration_mode
            """)
    }

    typealias AppRow = (
        String, String?, String, String, String?, Int64, String, String, Int64, Int64, String?, String?, String?,
        String?, String?, String?, Int64
    )
    static func app(_ row: AppRow) -> AppRecord {
        AppRecord(
            clientID: row.0, secretHash: row.1, redirectURIs: AppRecord.decode(row.2),
            postLogoutRedirectURIs: AppRecord.decode(row.3), backchannelLogoutURI: row.4, firstParty: row.5 != 0,
            idTokenAlgorithm: row.6, scopes: AppRecord.decode(row.7), createdAt: row.8, requirePAR: row.9 != 0,
            registration: row.10.map { AppRecord.Registration(mode: $0, clientName: row.11) }, jwks: row.12,
            jwksURI: row.13, pairwiseSector: row.14, userinfoAlgorithm: row.15, requireMFA: row.16 != 0)
    }

    package func app(clientID: String) async throws -> AppRecord? {
        let client = client
        return try await run("app lookup") {
            let rows = try await client.query(
                """
                SELECT client_id, secret_hash, redirect_uris, post_logout_redirect_uris, backchannel_logout_uri,
                    first_party, id_token_alg, scopes, created_at, require_par, registration_mode, client_name, jwks,
                    jwks_uri, pairwise_sector, userinfo_alg, require_mfa
                FROM apps WHERE client_id = \(clientID)
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
                    first_party, id_token_alg, scopes, created_at, require_par, registration_mode, client_name, jwks,
                    jwks_uri, pairwise_sector, userinfo_alg, require_mfa
                FROM apps ORDER BY client_id
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
            // Codes name their client without a reference (the CLI's is no row): its codes go with it.
            try await connection.query(
                "DELETE FROM authorization_codes WHERE client_id = \(clientID)", logger: logger
            ).drain()
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
            try await Self.queueLogouts(connection, browserSession: id, now: now, logger: logger)
            try await connection.query(
                "UPDATE browser_sessions SET revoked_at = \(now) WHERE id = \(id) AND revoked_at IS NULL",
                logger: logger
            ).drain()
            let rows = try await connection.query(
                """
                UPDATE sessions SET revoked_at = \(now)
                WHERE revoked_at IS NULL AND id IN (
                    SELECT session_id FROM app_signins WHERE browser_session = \(id))
                RETURNING id
                """, logger: logger
            ).decode(String.self)
            var ended: [String] = []
            for try await session in rows { ended.append(session) }
            return ended.sorted()
        }
    }

    @discardableResult package func revokeBrowserSession(id: String, now: Int64) async throws -> Bool {
        let logger = logger
        return try await transaction("browser session revocation") { connection in
            try await Self.queueLogouts(connection, browserSession: id, now: now, logger: logger)
            let rows = try await connection.query(
                "UPDATE browser_sessions SET revoked_at = \(now) WHERE id = \(id) AND revoked_at IS NULL RETURNING 1",
                logger: logger
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

    package func consents(user: UserID) async throws -> [ConsentRecord] {
        let client = client
        return try await run("consents lookup") {
            let rows = try await client.query(
                """
                SELECT client_id, scopes, granted_at FROM consents WHERE user_id = \(user.description)
                ORDER BY client_id
                """
            ).decode((String, String, Int64).self)
            var consents: [ConsentRecord] = []
            for try await (clientID, scopes, grantedAt) in rows {
                consents.append(
                    ConsentRecord(
                        clientID: clientID, scopes: scopes.split(separator: " ").map(String.init), grantedAt: grantedAt)
                )
            }
            return consents
        }
    }

    package func revokeConsent(user: UserID, clientID: String, now: Int64) async throws -> [String] {
        let logger = logger
        return try await transaction("consent revocation") { connection in
            try await connection.query(
                "DELETE FROM consents WHERE user_id = \(user.description) AND client_id = \(clientID)", logger: logger
            ).drain()
            try await connection.query(
                "DELETE FROM authorization_codes WHERE user_id = \(user.description) AND client_id = \(clientID)",
                logger: logger
            ).drain()
            let rows = try await connection.query(
                """
                UPDATE sessions SET revoked_at = \(now)
                WHERE user_id = \(user.description) AND client_id = \(clientID) AND revoked_at IS NULL
                RETURNING id
                """, logger: logger
            ).decode(String.self)
            var ended: [String] = []
            for try await id in rows { ended.append(id) }
            return ended.sorted()
        }
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

    /// Queues a back-channel logout for every app with a `backchannel_logout_uri` that signed in through the live
    /// browser sessions named (by id, or by user and optionally the way in): called in the transaction that
    /// ends them, before it does.
    static func queueLogouts(
        _ connection: PostgresConnection, browserSession: String? = nil, user: String? = nil,
        provider: (String, String)? = nil, now: Int64, logger: Logger
    ) async throws {
        try await connection.query(
            """
            INSERT INTO logout_deliveries (id, client_id, subject, sid, attempts, created_at, next_attempt_at,
                give_up_at)
            SELECT replace(gen_random_uuid()::text, '-', ''), s.client_id, b.user_id, b.id, 0, \(now), \(now),
                \(now + LogoutDelivery.retryFor)
            FROM browser_sessions b JOIN app_signins s ON s.browser_session = b.id
            JOIN apps a ON a.client_id = s.client_id
            WHERE b.revoked_at IS NULL AND a.backchannel_logout_uri IS NOT NULL
                AND (\(browserSession)::text IS NULL OR b.id = \(browserSession))
                AND (\(user)::text IS NULL OR b.user_id = \(user))
                AND (\(provider?.0)::text IS NULL OR b.signed_in_with IN (\(provider?.0), \(provider?.1)))
            GROUP BY b.id, s.client_id
            """, logger: logger
        ).drain()
    }

    package func claimLogoutDeliveries(now: Int64, limit: Int) async throws -> [LogoutDelivery] {
        // Every broker runs this every second, mostly to find nothing: one read asks first, so an idle pass is
        // one round trip instead of a transaction's four (timed under a name of its own).
        let client = client
        let anyDue = try await run("logout delivery claim", function: "logoutDeliveriesDue") {
            let rows = try await client.query(
                "SELECT EXISTS (SELECT 1 FROM logout_deliveries WHERE next_attempt_at <= \(now))"
            ).decode(Bool.self)
            for try await due in rows { return due }
            return false
        }
        guard anyDue else { return [] }
        let logger = logger
        return try await transaction("logout delivery claim") { connection in
            try await connection.query(
                """
                DELETE FROM logout_deliveries WHERE next_attempt_at <= \(now) AND client_id IN (
                    SELECT client_id FROM apps WHERE backchannel_logout_uri IS NULL)
                """, logger: logger
            ).drain()
            // SKIP LOCKED: two brokers claiming at once take different deliveries.
            let rows = try await connection.query(
                """
                UPDATE logout_deliveries d SET next_attempt_at = \(now + LogoutDelivery.lease),
                    attempts = d.attempts + 1
                FROM apps a
                WHERE a.client_id = d.client_id AND d.id IN (
                    SELECT id FROM logout_deliveries WHERE next_attempt_at <= \(now)
                    ORDER BY next_attempt_at, id LIMIT \(Int64(limit)) FOR UPDATE SKIP LOCKED)
                RETURNING d.id, d.client_id, a.backchannel_logout_uri, d.subject, d.sid, d.attempts - 1, d.created_at,
                    d.give_up_at
                """, logger: logger
            ).decode((String, String, String, String, String, Int64, Int64, Int64).self)
            var claimed: [LogoutDelivery] = []
            for try await row in rows {
                claimed.append(
                    LogoutDelivery(
                        id: row.0, clientID: row.1, uri: row.2, subject: row.3, sid: row.4, attempts: Int(row.5),
                        createdAt: row.6, giveUpAt: row.7))
            }
            return claimed.sorted { $0.id < $1.id }
        }
    }

    package func finishLogoutDelivery(id: String) async throws {
        try await query("logout delivery", "DELETE FROM logout_deliveries WHERE id = \(id)")
    }

    package func retryLogoutDelivery(id: String, at: Int64) async throws {
        try await query(
            "logout delivery retry", "UPDATE logout_deliveries SET next_attempt_at = \(at) WHERE id = \(id)")
    }

    package func pendingLogoutDeliveries() async throws -> Int {
        let client = client
        return try await run("logout queue") {
            let rows = try await client.query("SELECT COUNT(*) FROM logout_deliveries").decode(Int64.self)
            for try await count in rows { return Int(count) }
            return 0
        }
    }

    package func createPushedRequest(_ request: PushedRequestRecord, hash: [UInt8]) async throws {
        try await query(
            "pushed request",
            """
            INSERT INTO pushed_requests (hash, client_id, parameters, expires_at)
            VALUES (\(hash.hex), \(request.clientID), \(request.parameters), \(request.expiresAt))
            """)
    }

    package func takePushedRequest(hash: [UInt8], now: Int64) async throws -> PushedRequestRecord? {
        let client = client
        return try await run("pushed request redemption") {
            let rows = try await client.query(
                "DELETE FROM pushed_requests WHERE hash = \(hash.hex) RETURNING client_id, parameters, expires_at"
            ).decode((String, String, Int64).self)
            for try await row in rows {
                return row.2 > now ? PushedRequestRecord(clientID: row.0, parameters: row.1, expiresAt: row.2) : nil
            }
            return nil
        }
    }
}
