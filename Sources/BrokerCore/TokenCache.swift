/// Which cached session: one per broker and profile.
package struct SessionKey: Sendable, Hashable, CustomStringConvertible {
    /// The broker's base URL, normalized (no trailing slash).
    package let brokerURL: String
    package let profile: String

    package init(brokerURL: String, profile: String) {
        self.brokerURL = brokerURL
        self.profile = profile
    }

    package var description: String { "profile \"\(profile)\" at \(brokerURL)" }
}

/// What the CLI keeps per broker and profile (CONTRACT.md "session").
///
/// The refresh token is a ``Secret``: it prints redacted, so a session dropped into a log line or an
/// error message leaks nothing.
package struct Session: Sendable, Equatable {
    package var key: SessionKey
    package var userID: UserID
    package var provider: ProviderID
    package var accessToken: Secret
    /// When the access token expires, in seconds since 1970.
    package var expiresAt: Int64
    package var refreshToken: Secret?
    /// When the access token was obtained, in seconds since 1970 (absent in stores written without it).
    package var obtainedAt: Int64?
    /// Where the session's long-lived secrets are (issue "Keyring"): the refresh token (and the DPoP key) in
    /// the desktop keyring, not in the file; ``refreshToken`` is then read from there under the store's lock.
    package var secretsInKeyring = false
    /// Access tokens for single APIs (RFC 8707 `resource`), kept beside the session's own so that each API's
    /// token is fetched once per lifetime, not once per command. Short-lived like the session's access token, so
    /// kept in the file even when the refresh token is in the keyring.
    package var resourceTokens: [ResourceToken] = []

    package init(
        key: SessionKey,
        userID: UserID,
        provider: ProviderID,
        accessToken: Secret,
        expiresAt: Int64,
        refreshToken: Secret?,
        obtainedAt: Int64? = nil
    ) {
        self.key = key
        self.userID = userID
        self.provider = provider
        self.accessToken = accessToken
        self.expiresAt = expiresAt
        self.refreshToken = refreshToken
        self.obtainedAt = obtainedAt
    }

    /// Seconds the access token has left at `now` (negative once expired).
    package func remaining(at now: Int64) -> Int64 { expiresAt - now }

    /// Whether the access token can be handed out for a caller that wants `minValid` seconds.
    ///
    /// Yes when it has that long left — and also when it is brand new (obtained within the first tenth of
    /// its lifetime, and at least a second ago at most): a refresh would add no more than its age, because
    /// the broker gives every token the same lifetime. Without this, a `--min-valid` above the broker's
    /// lifetime would refresh on every call, and a process that started just after another's refresh
    /// would spend the fresh refresh token again instead of sharing it.
    package func satisfies(minValid: Int64, at now: Int64) -> Bool {
        Self.satisfies(expiresAt: expiresAt, obtainedAt: obtainedAt, minValid: minValid, at: now)
    }

    /// The rule of ``satisfies(minValid:at:)`` for any access token kept with its expiry and the moment it was
    /// obtained (the session's own, or one API's: ``ResourceToken``).
    static func satisfies(expiresAt: Int64, obtainedAt: Int64?, minValid: Int64, at now: Int64) -> Bool {
        let left = expiresAt - now
        guard left > 0 else { return false }
        if left >= minValid { return true }
        guard let obtainedAt, obtainedAt <= now else { return false }
        let lifetime = expiresAt - obtainedAt
        return now - obtainedAt < max(1, lifetime / 10)
    }
}

/// An access token for one API (`aud` = ``resource``), got with the session's refresh token.
package struct ResourceToken: Sendable, Equatable {
    package var resource: String
    package var accessToken: Secret
    package var expiresAt: Int64
    package var obtainedAt: Int64?

    package init(resource: String, accessToken: Secret, expiresAt: Int64, obtainedAt: Int64?) {
        self.resource = resource
        self.accessToken = accessToken
        self.expiresAt = expiresAt
        self.obtainedAt = obtainedAt
    }

    /// The most APIs one session keeps tokens for; the one expiring first makes room.
    package static let maxPerSession = 32

    /// ``Session/satisfies(minValid:at:)`` for this token.
    package func satisfies(minValid: Int64, at now: Int64) -> Bool {
        Session.satisfies(expiresAt: expiresAt, obtainedAt: obtainedAt, minValid: minValid, at: now)
    }
}

extension Session {
    /// The cached token for `resource`, if any (expired or not).
    package func token(for resource: String) -> ResourceToken? {
        resourceTokens.first { $0.resource == resource }
    }

    /// This session viewed through its cached token for `resource` (``viewed(as:)``), if it has one.
    package func viewed(forResource resource: String) -> Session? {
        token(for: resource).map(viewed(as:))
    }

    /// This session as `resource`'s token makes it: what `broker token --resource` prints and `broker request`
    /// sends (no refresh token: a resource's token is never refreshed on its own).
    package func viewed(as token: ResourceToken) -> Session {
        var view = self
        view.accessToken = token.accessToken
        view.expiresAt = token.expiresAt
        view.obtainedAt = token.obtainedAt
        view.refreshToken = nil
        view.resourceTokens = []
        return view
    }

    /// Keeps `token` (replacing the one for its resource), dropping expired ones at `now` and, past
    /// ``ResourceToken/maxPerSession``, the ones expiring first.
    package mutating func keep(_ token: ResourceToken, now: Int64) {
        var kept = resourceTokens.filter { $0.resource != token.resource && $0.expiresAt > now }
        kept.append(token)
        if kept.count > ResourceToken.maxPerSession {
            kept.sort { $0.expiresAt > $1.expiresAt }
            kept = Array(kept.prefix(ResourceToken.maxPerSession))
        }
        resourceTokens = kept.sorted { $0.resource < $1.resource }
    }
}

/// Why the credential store could not be used.
package enum TokenCacheError: Error, Sendable, CustomStringConvertible {
    /// The file is not a credential store this version understands; it was renamed to `movedTo` so that
    /// nothing in it is lost, and the next sign-in starts a fresh one.
    case unreadable(path: String, reason: String, movedTo: String?)
    /// The file system refused (permissions, disk full, …).
    case io(path: String, reason: String)
    /// The desktop keyring that holds the session's secrets cannot be used now (locked, gone, not answering):
    /// the sentence says what to do.
    case keyring(String)

    package var description: String {
        switch self {
        case .unreadable(let path, let reason, let movedTo):
            let moved = movedTo.map { "; kept it as \($0)" } ?? ""
            return "the credential store \(path) is unreadable (\(reason))\(moved)"
        case .io(let path, let reason):
            return "the credential store \(path): \(reason)"
        case .keyring(let reason):
            return reason
        }
    }
}

/// Where sessions live between commands; shared by every provider (ARCHITECTURE.md "Token cache").
///
/// Reads see a whole snapshot and take no lock. Changes happen inside ``locked()``: the lock excludes
/// every other process using the same store, which is what makes a refresh single-flight.
package protocol TokenCache: Sendable {
    func session(for key: SessionKey) throws(TokenCacheError) -> Session?
    func sessions() throws(TokenCacheError) -> [Session]
    /// Waits for the store's exclusive lock; the lock is held until the returned value is unlocked or
    /// released.
    func locked() throws(TokenCacheError) -> any LockedTokenCache
}

/// The store while this process holds its lock. Each read goes back to the file, so a change another
/// writer made before the lock was granted is seen.
package protocol LockedTokenCache: AnyObject {
    func session(for key: SessionKey) throws(TokenCacheError) -> Session?
    func sessions() throws(TokenCacheError) -> [Session]
    /// Stores `session` (replacing the one with its key) and returns it as stored (``Session/secretsInKeyring``
    /// says where its secrets went).
    @discardableResult
    func save(_ session: Session) throws(TokenCacheError) -> Session
    func remove(_ key: SessionKey) throws(TokenCacheError)
    func unlock()
}

/// RFC 3339 timestamps in UTC (`2026-11-23T06:40:00Z`), without Foundation's date machinery.
package enum RFC3339 {
    package static func format(epochSeconds: Int64) -> String {
        let time = UTCTime(epochSeconds: epochSeconds)
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return
            "\(time.year)-\(two(time.month))-\(two(time.day))T\(two(time.hour)):\(two(time.minute)):\(two(time.second))Z"
    }
}

/// A moment's UTC calendar date and time of day, from seconds since 1970-01-01T00:00:00Z, for the formats that
/// write one (``RFC3339``, HTTP's `Date`).
package struct UTCTime: Sendable {
    package let year: Int64
    /// 1–12.
    package let month: Int64
    /// 1–31.
    package let day: Int64
    package let hour: Int64
    package let minute: Int64
    package let second: Int64
    /// 0 for Sunday … 6 for Saturday.
    package let weekday: Int64

    package init(epochSeconds: Int64) {
        let days = epochSeconds >= 0 ? epochSeconds / 86_400 : (epochSeconds - 86_399) / 86_400
        let secondsOfDay = epochSeconds - days * 86_400
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        hour = secondsOfDay / 3600
        minute = secondsOfDay % 3600 / 60
        second = secondsOfDay % 60
        // 1970-01-01 was a Thursday.
        weekday = ((days + 4) % 7 + 7) % 7
    }
}
