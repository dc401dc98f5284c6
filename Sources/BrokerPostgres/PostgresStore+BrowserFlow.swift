import BrokerCore
package import BrokerStore
import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// Browser flow, on PostgreSQL: one facet of the store, in the same order in both dialects.
extension PostgresStore {
    package func createAuthorizationCode(_ code: AuthorizationCodeRecord) async throws {
        try await query(
            "code issue",
            """
            INSERT INTO authorization_codes (hash, client_id, user_id, redirect_uri, code_challenge, scope, nonce,
                auth_time, signed_in_with, browser_session, link_identity, link_session, expires_at, resource,
                claims)
            VALUES (\(code.hash.hex), \(code.clientID), \(code.userID.description), \(code.redirectURI),
                \(code.codeChallenge), \(code.scope), \(code.nonce), \(code.authTime), \(code.signedInWith.rawValue),
                \(code.browserSession), \(code.link?.serialized), \(code.linkSession), \(code.expiresAt),
                \(code.resource), \(code.claims))
            """)
    }

    package func redeemAuthorizationCode(hash: [UInt8], now: Int64) async throws -> CodeRedemption {
        let logger = logger
        return try await transaction("code redemption") { connection in
            let rows = try await connection.query(
                """
                SELECT client_id, user_id, redirect_uri, code_challenge, scope, nonce, auth_time, signed_in_with,
                    browser_session, expires_at, used_at, session_id, link_identity, link_session, resource, claims
                FROM authorization_codes WHERE hash = \(hash.hex) FOR UPDATE
                """, logger: logger
            ).decode(
                (
                    String, String, String, String?, String, String?, Int64, String, String?, Int64, Int64?, String?,
                    String?, String?, String?, String?
                ).self)
            for try await row in rows {
                if row.10 != nil { return .reused(session: row.11) }
                guard row.9 > now else { return .expired }
                guard let user = UserID(row.1), let provider = ProviderID(rawValue: row.7) else {
                    return .unknown
                }
                try await connection.query(
                    "UPDATE authorization_codes SET used_at = \(now) WHERE hash = \(hash.hex)", logger: logger
                ).drain()
                if let browserSession = row.8 {
                    // Only while the browser session it was issued in still stands (RT3-5), in this transaction.
                    let live = try await connection.query(
                        """
                        SELECT id FROM browser_sessions
                        WHERE id = \(browserSession) AND revoked_at IS NULL AND expires_at > \(now) FOR SHARE
                        """, logger: logger
                    ).decode(String.self)
                    var stands = false
                    for try await _ in live { stands = true }
                    guard stands else { return .browserSessionEnded }
                }
                return .redeemed(
                    AuthorizationCodeRecord(
                        hash: hash, clientID: row.0, userID: user, redirectURI: row.2, codeChallenge: row.3,
                        scope: row.4, nonce: row.5, authTime: row.6, signedInWith: provider, browserSession: row.8,
                        link: row.12.flatMap(IdentityRecord.init(serialized:)), linkSession: row.13,
                        resource: row.14, claims: row.15, expiresAt: row.9))
            }
            return .unknown
        }
    }

    package func attachSession(_ session: String, toCode hash: [UInt8], now: Int64) async throws {
        let logger = logger
        try await transaction("code session") { connection in
            try await connection.query(
                "UPDATE authorization_codes SET session_id = \(session) WHERE hash = \(hash.hex)", logger: logger
            ).drain()
            try await connection.query(
                """
                INSERT INTO app_signins (browser_session, session_id, client_id, created_at)
                SELECT c.browser_session, \(session), c.client_id, \(now) FROM authorization_codes c
                JOIN browser_sessions b ON b.id = c.browser_session JOIN apps a ON a.client_id = c.client_id
                WHERE c.hash = \(hash.hex)
                ON CONFLICT DO NOTHING
                """, logger: logger
            ).drain()
            try await connection.query(
                """
                UPDATE sessions SET revoked_at = \(now) WHERE id = \(session) AND revoked_at IS NULL AND EXISTS (
                    SELECT 1 FROM authorization_codes c WHERE c.hash = \(hash.hex) AND c.browser_session IS NOT NULL
                    AND NOT EXISTS (
                        SELECT 1 FROM browser_sessions b WHERE b.id = c.browser_session
                        AND b.revoked_at IS NULL AND b.expires_at > \(now)))
                """, logger: logger
            ).drain()
        }
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
    func returnsRow(_ what: String, _ query: PostgresQuery, function: StaticString = #function) async throws -> Bool {
        let client = client
        return try await run(what, function: function) {
            for try await _ in try await client.query(query).decode(Int.self) { return true }
            return false
        }
    }
}
