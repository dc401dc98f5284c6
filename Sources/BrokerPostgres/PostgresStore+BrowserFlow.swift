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
    func returnsRow(_ what: String, _ query: PostgresQuery, function: StaticString = #function) async throws -> Bool {
        let client = client
        return try await run(what, function: function) {
            for try await _ in try await client.query(query).decode(Int.self) { return true }
            return false
        }
    }
}
