import BrokerCore
import BrokerSystem
import GRDB

/// Browser flow, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {
    package func createAuthorizationCode(_ code: AuthorizationCodeRecord) async throws {
        try await write { db in
            try db.execute(
                sql: """
                    INSERT INTO authorization_codes (hash, client_id, user_id, redirect_uri, code_challenge, scope,
                        nonce, auth_time, signed_in_with, browser_session, link_identity, link_session, expires_at,
                        resource, claims)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    code.hash.hex, code.clientID, code.userID.description, code.redirectURI, code.codeChallenge,
                    code.scope, code.nonce, code.authTime, code.signedInWith.rawValue, code.browserSession,
                    code.link?.serialized, code.linkSession, code.expiresAt, code.resource,
                    code.claims,
                ])
        }
    }

    package func redeemAuthorizationCode(hash: [UInt8], now: Int64) async throws -> CodeRedemption {
        try await write { db in
            guard
                let row = try Row.fetchOne(
                    db, sql: "SELECT * FROM authorization_codes WHERE hash = ?", arguments: [hash.hex])
            else { return .unknown }
            if (row["used_at"] as Int64?) != nil { return .reused(session: row["session_id"]) }
            guard (row["expires_at"] as Int64) > now else { return .expired }
            guard let user = UserID(row["user_id"] as String),
                let provider = ProviderID(rawValue: row["signed_in_with"] as String)
            else { return .unknown }
            try db.execute(
                sql: "UPDATE authorization_codes SET used_at = ? WHERE hash = ?", arguments: [now, hash.hex])
            let browserSession: String? = row["browser_session"]
            if let browserSession {
                // Only while the browser session it was issued in still stands (RT3-5), decided in this
                // transaction.
                let live = try Bool.fetchOne(
                    db, sql: "SELECT revoked_at IS NULL AND expires_at > ? FROM browser_sessions WHERE id = ?",
                    arguments: [now, browserSession])
                guard live == true else { return .browserSessionEnded }
            }
            return .redeemed(
                AuthorizationCodeRecord(
                    hash: hash, clientID: row["client_id"], userID: user, redirectURI: row["redirect_uri"],
                    codeChallenge: row["code_challenge"], scope: row["scope"], nonce: row["nonce"],
                    authTime: row["auth_time"], signedInWith: provider, browserSession: browserSession,
                    link: (row["link_identity"] as String?).flatMap(IdentityRecord.init(serialized:)),
                    linkSession: row["link_session"], resource: row["resource"], claims: row["claims"],
                    expiresAt: row["expires_at"]))
        }
    }

    package func attachSession(_ session: String, toCode hash: [UInt8], now: Int64) async throws {
        try await write { db in
            try db.execute(
                sql: "UPDATE authorization_codes SET session_id = ? WHERE hash = ?", arguments: [session, hash.hex])
            try db.execute(
                sql: """
                    INSERT INTO app_signins (browser_session, session_id, client_id, created_at)
                    SELECT c.browser_session, ?, c.client_id, ? FROM authorization_codes c
                    JOIN browser_sessions b ON b.id = c.browser_session JOIN apps a ON a.client_id = c.client_id
                    WHERE c.hash = ?
                    ON CONFLICT DO NOTHING
                    """,
                arguments: [session, now, hash.hex])
            try db.execute(
                sql: """
                    UPDATE sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL AND EXISTS (
                        SELECT 1 FROM authorization_codes c WHERE c.hash = ? AND c.browser_session IS NOT NULL
                        AND NOT EXISTS (
                            SELECT 1 FROM browser_sessions b WHERE b.id = c.browser_session
                            AND b.revoked_at IS NULL AND b.expires_at > ?))
                    """,
                arguments: [now, session, hash.hex, now])
        }
    }

    /// On the caller's thread, as the session reads are (``SessionLookup``): every DPoP-bound request asks.
    package func isStateMarkerSpent(_ marker: String) async throws -> Bool {
        try observation.timedNow(#function) { try lookup.isMarkerSpent(marker) }
    }

    /// In a transaction shared with the markers spent at the same moment (``StateMarkerWrites``).
    package func spendStateMarker(_ marker: String, expiresAt: Int64) async throws -> Bool {
        try await observation.timed(#function) { try await markerWrites.spend(marker, expiresAt: expiresAt) }
    }
}
