package import BrokerCore
import BrokerSystem
import GRDB

/// Accounts and users, on SQLite: one facet of the store, in the same order in both dialects.
extension SQLiteStore {

    package func createPasswordAccount(user: UserRecord, email: String, passwordHash: String, verifiedAt: Int64?)
        async throws
    {
        do {
            try await write { db in
                try Self.insert(user, db)
                try db.execute(
                    sql: """
                        INSERT INTO password_accounts (email, user_id, password_hash, updated_at, email_verified_at)
                        VALUES (?, ?, ?, ?, ?)
                        """,
                    arguments: [email, user.id.description, passwordHash, user.createdAt, verifiedAt]
                )
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.conflict("an account with this email exists")
        }
    }

    package func passwordAccount(email: String) async throws -> PasswordAccount? {
        try await passwordAccount(where: "a.email", is: email)
    }

    package func passwordAccount(user: UserID) async throws -> PasswordAccount? {
        try await passwordAccount(where: "a.user_id", is: user.description)
    }

    /// The password account whose `column` (one of ours, never input) is `value`.
    func passwordAccount(where column: StaticString, is value: String, function: StaticString = #function)
        async throws -> PasswordAccount?
    {
        try await read(function) { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT a.email, a.password_hash, a.email_verified_at, u.id, u.email AS user_email, u.name,
                        u.created_at
                        FROM password_accounts a JOIN users u ON u.id = a.user_id WHERE \(column) = ?
                        """,
                    arguments: [value]
                ),
                let user = Self.user(row)
            else { return nil }
            return PasswordAccount(
                user: user, email: row["email"], passwordHash: row["password_hash"],
                emailVerifiedAt: row["email_verified_at"])
        }
    }

    package func updatePasswordHash(email: String, from old: String, to new: String) async throws {
        try await write { db in
            // Compare-and-set: a concurrent password change wins over a rehash.
            try db.execute(
                sql: "UPDATE password_accounts SET password_hash = ?, updated_at = strftime('%s','now') "
                    + "WHERE email = ? AND password_hash = ?",
                arguments: [new, email, old]
            )
        }
    }

    package func signIn(_ identity: IdentityRecord, now: Int64) async throws -> IdentitySignIn {
        try await write { db in
            let selectUser = "SELECT id, email AS user_email, name, created_at FROM users WHERE id = ?"
            if let owner = try String.fetchOne(
                db, sql: "SELECT user_id FROM identities WHERE provider = ? AND subject = ?",
                arguments: [identity.provider.rawValue, identity.subject])
            {
                // A name the provider sends only once (Sign in with Apple: the first sign-in) is kept after it.
                try db.execute(
                    sql: "UPDATE identities SET email = ?, name = COALESCE(?, name) WHERE provider = ? AND subject = ?",
                    arguments: [identity.email, identity.name, identity.provider.rawValue, identity.subject])
                // The user's own email and name follow the identity their id was made from.
                if owner == identity.derivedUserID.description {
                    try db.execute(
                        sql: "UPDATE users SET email = ?, name = COALESCE(?, name) WHERE id = ?",
                        arguments: [identity.email, identity.name, owner])
                    // Its profile too, when the provider sent one; the time only when it changed.
                    if let profile = identity.profileText {
                        try db.execute(
                            sql: "UPDATE users SET profile_updated_at = CASE WHEN profile IS ? THEN "
                                + "profile_updated_at ELSE ? END, profile = ? WHERE id = ?",
                            arguments: [profile, now, profile, owner])
                    }
                }
                guard let user = try Row.fetchOne(db, sql: selectUser, arguments: [owner]).flatMap(Self.user) else {
                    throw StoreError.unavailable("the identity's user \(owner) is missing")
                }
                return .user(user)
            }
            let id = identity.derivedUserID
            if try Row.fetchOne(db, sql: selectUser, arguments: [id.description]) != nil { return .unlinked(from: id) }
            let user = UserRecord(id: id, email: identity.email, name: identity.name, createdAt: now)
            try Self.insert(user, db)
            if let profile = identity.profileText {
                try db.execute(
                    sql: "UPDATE users SET profile = ?, profile_updated_at = ? WHERE id = ?",
                    arguments: [profile, now, id.description])
            }
            try Self.insert(identity, user: id, now: now, db)
            return .user(user)
        }
    }
}
