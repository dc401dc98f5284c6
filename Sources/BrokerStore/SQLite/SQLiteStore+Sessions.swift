import BrokerCore
import BrokerSystem
import GRDB

/// Sessions and refresh tokens, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {

    package func createSession(_ session: SessionRecord, firstToken: RefreshTokenRecord) async throws {
        try await write { db in
            // Writes are serialized: no disable can slip between this check and the insert.
            let user = try Row.fetchOne(
                db, sql: "SELECT disabled_at FROM users WHERE id = ?", arguments: [session.userID.description])
            if let user, (user["disabled_at"] as Int64?) != nil {
                throw StoreError(code: .disabled, reason: "the user is disabled")
            }
            try db.execute(
                sql: """
                    INSERT INTO sessions (id, user_id, client_id, scope, created_at, signed_in_with, dpop_jkt, claims)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    session.id, session.userID.description, session.clientID, session.scope, session.createdAt,
                    session.signedInWith?.rawValue, session.dpopJKT, session.claims,
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
        let hashHex = hash.hex
        return try await write { db -> RotationOutcome in
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(
                        sql: """
                            SELECT \(RotationColumn.list)
                            FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id
                            JOIN users u ON u.id = s.user_id LEFT JOIN password_accounts a ON a.user_id = u.id
                            WHERE t.hash = ?
                            """),
                    arguments: [hashHex]
                ),
                let userID = UserID(row[RotationColumn.userID.rawValue] as String)
            else { return .unknown }
            let session = SessionRecord(
                id: row[RotationColumn.sessionID.rawValue], userID: userID,
                clientID: row[RotationColumn.clientID.rawValue], scope: row[RotationColumn.scope.rawValue],
                createdAt: row[RotationColumn.createdAt.rawValue], revokedAt: row[RotationColumn.revokedAt.rawValue],
                signedInWith: (row[RotationColumn.signedInWith.rawValue] as String?).flatMap(
                    ProviderID.init(rawValue:)),
                dpopJKT: row[RotationColumn.dpopJKT.rawValue])
            let user = UserRecord(
                id: userID, email: row[RotationColumn.userEmail.rawValue], name: row[RotationColumn.userName.rawValue],
                createdAt: row[RotationColumn.userCreatedAt.rawValue])
            switch RotationRule.decide(
                revokedAt: session.revokedAt, boundKey: session.dpopJKT, proofKey: proofKey,
                usedAt: row[RotationColumn.usedAt.rawValue] as Int64?,
                expiresAt: row[RotationColumn.expiresAt.rawValue],
                now: now)
            {
            case .revoked: return .revoked
            case .boundToAnotherKey: return .boundToAnotherKey
            case .reused:
                try db.cachedStatement(sql: "UPDATE sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL")
                    .execute(arguments: [now, session.id])
                return .reused(sessionID: session.id)
            case .expired: return .expired
            case .rotate: break
            }
            try db.cachedStatement(sql: "UPDATE refresh_tokens SET used_at = ? WHERE hash = ? AND used_at IS NULL")
                .execute(arguments: [now, hashHex])
            // SQLite serialises writers, so this cannot race; the check keeps the invariant explicit.
            guard db.changesCount == 1 else { return .reused(sessionID: session.id) }
            try db.cachedStatement(
                sql: "INSERT INTO refresh_tokens (hash, session_id, created_at, expires_at) VALUES (?, ?, ?, ?)"
            ).execute(arguments: [nextHash.hex, session.id, now, nextExpiresAt])
            return .rotated(
                SessionView(
                    session: session, user: user,
                    emailVerifiedAt: row[RotationColumn.emailVerifiedAt.rawValue] as Int64?))
        }
    }

    package func revokeSession(byRefreshTokenHash hash: [UInt8], now: Int64) async throws -> Bool {
        try await write { db in
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
        try await write { db in
            try db.execute(
                sql: "UPDATE sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                arguments: [now, id]
            )
            return db.changesCount == 1
        }
    }

    package func session(id: String) async throws -> SessionRecord? {
        try await read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT id, user_id, client_id, scope, created_at, revoked_at, signed_in_with, claims
                    FROM sessions WHERE id = ?
                    """,
                arguments: [id]
            ).flatMap(Self.session)
        }
    }

    /// Answered by ``SessionLookup`` on the caller's thread: the hot path of every `/auth/me`.
    package nonisolated(nonsending) func sessionWithUser(id: String) async throws -> SessionView? {
        try observation.timedNow(#function) { try lookup.sessionWithUser(id: id) }
    }

    package func purge(expiredBefore before: Int64, shortLivedBefore: Int64) async throws {
        try await write { db in
            try db.execute(sql: "DELETE FROM refresh_tokens WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM exchanged_tokens WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM authorization_codes WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM state_markers WHERE expires_at < ?", arguments: [shortLivedBefore])
            try db.execute(sql: "DELETE FROM email_links WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM device_codes WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM browser_sessions WHERE expires_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM pushed_requests WHERE expires_at < ?", arguments: [shortLivedBefore])
            try db.execute(sql: "DELETE FROM registration_tokens WHERE expires_at < ?", arguments: [before])
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
}

/// The refresh rotation's SELECT, read by position. GRDB finds a column by name through a lower-cased copy of
/// the name at every read: ~50,000 instructions of a rotation's store call under callgrind, on the hot path of
/// every refresh grant. The SELECT list is made from these cases, so a position cannot drift from its column.
private enum RotationColumn: Int, CaseIterable {
    case expiresAt, usedAt, sessionID, userID, clientID, scope, createdAt, revokedAt, signedInWith, dpopJKT
    case userEmail, userName, userCreatedAt, emailVerifiedAt

    var expression: String {
        switch self {
        case .expiresAt: "t.expires_at"
        case .usedAt: "t.used_at"
        case .sessionID: "s.id"
        case .userID: "s.user_id"
        case .clientID: "s.client_id"
        case .scope: "s.scope"
        case .createdAt: "s.created_at"
        case .revokedAt: "s.revoked_at"
        case .signedInWith: "s.signed_in_with"
        case .dpopJKT: "s.dpop_jkt"
        case .userEmail: "u.email"
        case .userName: "u.name"
        case .userCreatedAt: "u.created_at"
        case .emailVerifiedAt: "a.email_verified_at"
        }
    }

    static let list = allCases.map(\.expression).joined(separator: ", ")
}
