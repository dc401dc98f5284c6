package import BrokerCore

/// A user as `broker users` shows them.
package struct UserStatus: Sendable, Hashable {
    package var user: UserRecord
    /// When the user was disabled; `nil` while they may sign in.
    package var disabledAt: Int64?

    package init(user: UserRecord, disabledAt: Int64?) {
        self.user = user
        self.disabledAt = disabledAt
    }
}

/// The broker's persistent state, behind one protocol so that SQLite and PostgreSQL are interchangeable.
///
/// Every method is one transaction. Times are seconds since the epoch, passed in so that callers own the clock.
/// What `broker users` and `broker sessions` need: what an operator lists and removes while brokers run.
package protocol AdminStore: Sendable {
    /// Every user (of one provider, when given), oldest first, with when each was disabled.
    func users(provider: ProviderID?) async throws -> [UserStatus]

    /// One user and when they were disabled.
    func userStatus(id: UserID) async throws -> UserStatus?

    /// Disables a user — in the same transaction revoking every live session of theirs, so that their tokens
    /// stop at once and no session can start for them (``Store/createSession(_:firstToken:)`` refuses) — or
    /// enables them again. Returns whether the user exists.
    func setUserDisabled(id: UserID, disabled: Bool, now: Int64) async throws -> Bool

    /// Deletes a user and everything of theirs (password account, sessions, refresh tokens, codes); returns
    /// whether the user existed. Their access tokens are refused at once: their session is gone.
    func deleteUser(id: UserID, now: Int64) async throws -> Bool

    /// Every session (of one user, when given), newest first, revoked ones included.
    func sessions(user: UserID?) async throws -> [SessionRecord]

    /// Revokes every live session of `user`; returns how many were live.
    func revokeSessions(user: UserID, now: Int64) async throws -> Int
}
