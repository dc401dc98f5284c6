import BrokerCore
import BrokerSystem
import GRDB

/// Browser flow, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {
    package func createAuthorizationCode(_ code: AuthorizationCodeRecord) async throws {
        try await write { db in
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
        try await write { db in
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
        try await write { db in
            try db.execute(
                sql: "UPDATE authorization_codes SET session_id = ? WHERE hash = ?",
                arguments: [sessionID, hash.hex]
            )
        }
    }

    package func isStateMarkerSpent(_ marker: String) async throws -> Bool {
        try await read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM state_markers WHERE marker = ?", arguments: [marker]) ?? false
        }
    }

    package func spendStateMarker(_ marker: String, expiresAt: Int64) async throws -> Bool {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO state_markers (marker, expires_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                arguments: [marker, expiresAt]
            )
            return db.changesCount == 1
        }
    }
}
