package import BrokerCore
import BrokerSystem
import GRDB

/// Linked identities, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {
    package func identities(user: UserID) async throws -> [LinkedIdentity] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT provider, subject, email, name, linked_at FROM identities WHERE user_id = ?
                    ORDER BY linked_at, provider
                    """,
                arguments: [user.description]
            ).compactMap { row in
                guard let provider = ProviderID(rawValue: row["provider"]) else { return nil }
                return LinkedIdentity(
                    identity: IdentityRecord(
                        provider: provider, subject: row["subject"], email: row["email"], name: row["name"]),
                    userID: user, linkedAt: row["linked_at"])
            }
        }
    }

    package func identityOwner(provider: ProviderID, subject: String) async throws -> UserID? {
        try await read { db in
            try String.fetchOne(
                db, sql: "SELECT user_id FROM identities WHERE provider = ? AND subject = ?",
                arguments: [provider.rawValue, subject]
            ).flatMap(UserID.init)
        }
    }

    package func linkIdentity(_ identity: IdentityRecord, to user: UserID, now: Int64) async throws -> LinkOutcome {
        try await write { db in
            guard try Int.fetchOne(db, sql: "SELECT 1 FROM users WHERE id = ?", arguments: [user.description]) != nil
            else { return .userMissing }
            if let owner = try String.fetchOne(
                db, sql: "SELECT user_id FROM identities WHERE provider = ? AND subject = ?",
                arguments: [identity.provider.rawValue, identity.subject])
            {
                return owner == user.description ? .alreadyLinked : .ownedByAnotherUser
            }
            if let other = try String.fetchOne(
                db, sql: "SELECT subject FROM identities WHERE user_id = ? AND provider = ?",
                arguments: [user.description, identity.provider.rawValue])
            {
                return .providerTaken(subject: other)
            }
            // An identity unlinked from the user its id was made from may return to that user only.
            if identity.derivedUserID != user,
                try Int.fetchOne(
                    db, sql: "SELECT 1 FROM users WHERE id = ?", arguments: [identity.derivedUserID.description])
                    != nil
            {
                return .ownedByAnotherUser
            }
            try Self.insert(identity, user: user, now: now, db)
            return .linked
        }
    }

    package func addPasswordAccount(user: UserID, email: String, passwordHash: String, now: Int64) async throws
        -> PasswordLinkOutcome
    {
        try await write { db in
            guard try Int.fetchOne(db, sql: "SELECT 1 FROM users WHERE id = ?", arguments: [user.description]) != nil
            else { return .userMissing }
            if try Int.fetchOne(
                db, sql: "SELECT 1 FROM password_accounts WHERE user_id = ?", arguments: [user.description]) != nil
            {
                return .alreadyHasOne
            }
            if try Int.fetchOne(db, sql: "SELECT 1 FROM password_accounts WHERE email = ?", arguments: [email]) != nil {
                return .emailTaken
            }
            try db.execute(
                sql: "INSERT INTO password_accounts (email, user_id, password_hash, updated_at) VALUES (?, ?, ?, ?)",
                arguments: [email, user.description, passwordHash, now])
            return .added
        }
    }

    package func releaseUnverifiedAddress(email: String, now: Int64) async throws -> ReleasedAddress? {
        try await write { db in
            guard
                let owner = try String.fetchOne(
                    db,
                    sql: "SELECT user_id FROM password_accounts WHERE email = ? AND email_verified_at IS NULL",
                    arguments: [email]),
                let user = UserID(owner)
            else { return nil }
            try db.execute(sql: "DELETE FROM password_accounts WHERE email = ?", arguments: [email])
            try db.execute(
                sql: "UPDATE email_links SET used_at = ? WHERE user_id = ? AND used_at IS NULL",
                arguments: [now, owner])
            // A password's sessions, with or without a second factor.
            let (password, withCode) = ProviderID.custom.recordedWays
            try db.execute(
                sql: """
                    UPDATE sessions SET revoked_at = ?
                    WHERE user_id = ? AND signed_in_with IN (?, ?) AND revoked_at IS NULL
                    """,
                arguments: [now, owner, password, withCode])
            try Self.queueLogouts(
                db, where: "b.user_id = ? AND b.signed_in_with IN (?, ?)", [owner, password, withCode], now: now)
            try db.execute(
                sql: """
                    UPDATE browser_sessions SET revoked_at = ?
                    WHERE user_id = ? AND signed_in_with IN (?, ?) AND revoked_at IS NULL
                    """,
                arguments: [now, owner, password, withCode])
            let others =
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM identities WHERE user_id = ?", arguments: [owner]) ?? 0
            if others == 0 { try db.execute(sql: "DELETE FROM users WHERE id = ?", arguments: [owner]) }
            return ReleasedAddress(user: user, userDeleted: others == 0)
        }
    }

    package func unlinkIdentity(user: UserID, provider: ProviderID, now: Int64) async throws -> UnlinkOutcome {
        try await write { db in
            let has: Bool
            if provider == .custom {
                has =
                    try Int.fetchOne(
                        db, sql: "SELECT 1 FROM password_accounts WHERE user_id = ?", arguments: [user.description])
                    != nil
            } else {
                has =
                    try Int.fetchOne(
                        db, sql: "SELECT 1 FROM identities WHERE user_id = ? AND provider = ?",
                        arguments: [user.description, provider.rawValue]) != nil
            }
            guard has else { return .notLinked }
            guard try Self.waysIn(db, user: user.description) > 1 else { return .lastWayIn }
            if provider == .custom {
                // A verified address outlives the password: an account left with passkeys only recovers by mail.
                try db.execute(
                    sql: """
                        INSERT INTO recovery_addresses (user_id, email, verified_at)
                        SELECT user_id, email, email_verified_at FROM password_accounts
                        WHERE user_id = ? AND email_verified_at IS NOT NULL
                        ON CONFLICT (user_id) DO UPDATE SET email = excluded.email, verified_at = excluded.verified_at
                        """,
                    arguments: [user.description])
                try db.execute(sql: "DELETE FROM password_accounts WHERE user_id = ?", arguments: [user.description])
                try db.execute(
                    sql: "UPDATE email_links SET used_at = ? WHERE user_id = ? AND used_at IS NULL",
                    arguments: [now, user.description])
            } else {
                try db.execute(
                    sql: "DELETE FROM identities WHERE user_id = ? AND provider = ?",
                    arguments: [user.description, provider.rawValue])
            }
            // The way's sessions (a password's with or without a second factor).
            let (way, alsoWay) = provider.recordedWays
            let ended = try String.fetchAll(
                db,
                sql: """
                    UPDATE sessions SET revoked_at = ?
                    WHERE user_id = ? AND signed_in_with IN (?, ?) AND revoked_at IS NULL RETURNING id
                    """,
                arguments: [now, user.description, way, alsoWay])
            try Self.queueLogouts(
                db, where: "b.user_id = ? AND b.signed_in_with IN (?, ?)", [user.description, way, alsoWay], now: now)
            try db.execute(
                sql: """
                    UPDATE browser_sessions SET revoked_at = ?
                    WHERE user_id = ? AND signed_in_with IN (?, ?) AND revoked_at IS NULL
                    """,
                arguments: [now, user.description, way, alsoWay])
            return .unlinked(endedSessions: ended.sorted())
        }
    }

    package func userProfile(id: UserID) async throws -> UserProfile? {
        try await read { db in
            try Row.fetchOne(
                db, sql: "SELECT profile, profile_updated_at, created_at FROM users WHERE id = ?",
                arguments: [id.description]
            ).map { UserProfile(text: $0["profile"], updatedAt: $0["profile_updated_at"], createdAt: $0["created_at"]) }
        }
    }

    package func user(id: UserID) async throws -> UserRecord? {
        try await read { db in
            try Row.fetchOne(
                db,
                sql: "SELECT id, email AS user_email, name, created_at FROM users WHERE id = ?",
                arguments: [id.description]
            ).flatMap(Self.user)
        }
    }

}
