import BrokerCore
package import BrokerStore
import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// Sessions and refresh tokens, on PostgreSQL: one facet of the store, in the same order in both dialects.
extension PostgresStore {
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
                INSERT INTO sessions (id, user_id, client_id, scope, created_at, signed_in_with, dpop_jkt, claims)
                VALUES (\(session.id), \(session.userID.description), \(session.clientID), \(session.scope),
                        \(session.createdAt), \(session.signedInWith?.rawValue), \(session.dpopJKT),
                        \(session.claims))
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
        // ``RotationRule``, as the SQLite store's transaction asks it; the statement acted on the same answers.
        guard let found else { return .unknown }
        let session = found.view.session
        switch RotationRule.decide(
            revokedAt: session.revokedAt, boundKey: session.dpopJKT, proofKey: proofKey, usedAt: found.usedAt,
            expiresAt: found.expiresAt, now: now)
        {
        case .revoked: return .revoked
        case .boundToAnotherKey: return .boundToAnotherKey
        case .reused: return .reused(sessionID: session.id)
        case .expired: return .expired
        case .rotate:
            // Spent by another rotation between the statement's read and its write: reuse after all.
            guard found.spent == 1 else { return .reused(sessionID: session.id) }
            return .rotated(found.view)
        }
    }

    struct RotationRow: Sendable {
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

    package func session(id: String) async throws -> SessionRecord? {
        let client = client
        return try await run("session lookup", function: nil) {
            let rows = try await client.query(
                """
                SELECT user_id, client_id, scope, created_at, revoked_at, signed_in_with, claims FROM sessions
                WHERE id = \(id)
                """
            ).decode((String, String, String?, Int64, Int64?, String?, String?).self)
            for try await (user, clientID, scope, created, revoked, way, claims) in rows {
                guard let userID = UserID(user) else { return nil }
                return SessionRecord(
                    id: id, userID: userID, clientID: clientID, scope: scope, createdAt: created, revokedAt: revoked,
                    signedInWith: way.flatMap(ProviderID.init(rawValue:)), claims: claims)
            }
            return nil
        }
    }

    package nonisolated(nonsending) func sessionWithUser(id: String) async throws -> SessionView? {
        try await observation.timed(#function) { try await batchedSessionWithUser(id: id) }
    }

    private func batchedSessionWithUser(id: String) async throws -> SessionView? {
        try await sessionReads.read(id) { [self] ids in
            let client = client
            return try await run("session lookup", function: nil) { () -> [String: SessionView] in
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

    package func purge(expiredBefore before: Int64, shortLivedBefore: Int64) async throws {
        let logger = logger
        try await transaction("purge") { connection in
            for statement: PostgresQuery in [
                "DELETE FROM refresh_tokens WHERE expires_at < \(before)",
                "DELETE FROM exchanged_tokens WHERE expires_at < \(before)",
                "DELETE FROM authorization_codes WHERE expires_at < \(before)",
                "DELETE FROM state_markers WHERE expires_at < \(shortLivedBefore)",
                "DELETE FROM email_links WHERE expires_at < \(before)",
                "DELETE FROM device_codes WHERE expires_at < \(before)",
                "DELETE FROM browser_sessions WHERE expires_at < \(before)",
                "DELETE FROM pushed_requests WHERE expires_at < \(shortLivedBefore)",
                "DELETE FROM registration_tokens WHERE expires_at < \(before)",
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
}
