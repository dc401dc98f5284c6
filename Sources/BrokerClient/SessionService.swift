package import BrokerCore
import Glibc

/// Why no usable token could be produced; each case maps to one exit code in the CLI.
package enum SessionError: Error, Sendable, CustomStringConvertible {
    /// No session for this broker and profile (exit 4).
    case signedOut(SessionKey)
    /// The broker refused the session (refresh token spent, revoked or expired); it was removed (exit 4).
    case rejected(SessionKey, reason: String)
    /// The credential store is unusable (exit 4 when unreadable: there is no valid session; 1 for I/O).
    case cache(TokenCacheError)
    /// The broker could not be reached or failed (exit 1).
    case broker(BrokerAPIError)

    package var description: String {
        switch self {
        case .signedOut(let key): "not signed in (\(key))"
        case .rejected(let key, let reason): "the broker no longer accepts the session (\(key)): \(reason)"
        case .cache(let error): error.description
        case .broker(let error): error.description
        }
    }
}

/// Sessions from the client's side: reading them, refreshing them once for everyone, dropping dead ones.
package struct SessionService: Sendable {
    package let cache: any TokenCache
    package let api: BrokerAPI
    package let key: SessionKey
    let clock: any WallClock

    package init(
        cache: any TokenCache,
        api: BrokerAPI,
        key: SessionKey,
        clock: any WallClock = SystemClock()
    ) {
        self.cache = cache
        self.api = api
        self.key = key
        self.clock = clock
    }

    /// The cached session when its access token is valid for at least `minValid` seconds — no lock, no
    /// network: the path `broker token` takes almost every time.
    package func cachedSession(minValid: Int64) throws(SessionError) -> Session? {
        let session: Session? = try cacheStep { () throws(TokenCacheError) in try cache.session(for: key) }
        guard let session, session.satisfies(minValid: minValid, at: clock.seconds()) else { return nil }
        return session
    }

    /// A session whose access token meets `minValid`, refreshing it when needed (CONTRACT.md `broker token`).
    ///
    /// Single-flight across processes: the refresh happens under the store's lock. A process that waited
    /// for the lock re-reads the store first; if the access token changed meanwhile, another process has
    /// just refreshed, and its session is the answer — even when the broker's lifetime is shorter than
    /// `minValid`, which would otherwise make every waiter refresh again.
    package func validSession(minValid: Int64) async throws(SessionError) -> Session {
        let seen: Session? = try cacheStep { () throws(TokenCacheError) in try cache.session(for: key) }
        guard let seen else { throw .signedOut(key) }
        if seen.satisfies(minValid: minValid, at: clock.seconds()) { return seen }

        let locked: any LockedTokenCache = try cacheStep { () throws(TokenCacheError) in try cache.locked() }
        defer { locked.unlock() }
        let current: Session? = try cacheStep { () throws(TokenCacheError) in try locked.session(for: key) }
        guard let current else { throw .signedOut(key) }
        if current.accessToken != seen.accessToken && current.remaining(at: clock.seconds()) > 0 { return current }
        if current.satisfies(minValid: minValid, at: clock.seconds()) { return current }
        return try await refresh(current, locked: locked)
    }

    /// A session after an API refused `rejected` (a 401): refreshed even when the token still looked valid —
    /// it may have been revoked, or signed by a key the API no longer trusts.
    ///
    /// Single-flight as ``validSession(minValid:)``: under the store's lock, a session whose access token is
    /// no longer `rejected` (and not expired) was just renewed by another process, and is the answer; so
    /// twenty requests refused at the same moment make one refresh.
    package func renew(rejecting rejected: Secret) async throws(SessionError) -> Session {
        let locked: any LockedTokenCache = try cacheStep { () throws(TokenCacheError) in try cache.locked() }
        defer { locked.unlock() }
        let current: Session? = try cacheStep { () throws(TokenCacheError) in try locked.session(for: key) }
        guard let current else { throw .signedOut(key) }
        if current.accessToken != rejected && current.remaining(at: clock.seconds()) > 0 { return current }
        return try await refresh(current, locked: locked)
    }

    /// Marks the cached access token as spent so that the next use refreshes (a credential helper's
    /// `erase`: the tool's server refused it). Only when the cached token is `token` (or `token` is `nil`):
    /// an erase of an older token must not spend a fresh one. The refresh token stays. Returns whether the
    /// cached token was marked.
    @discardableResult
    package func distrust(accessToken token: Secret?, resource: String? = nil) throws(SessionError) -> Bool {
        try cacheStep { () throws(TokenCacheError) in
            let locked = try cache.locked()
            defer { locked.unlock() }
            guard var session = try locked.session(for: key) else { return false }
            let now = clock.seconds()
            let match: (ResourceToken) -> Bool = { cached in
                token.map { cached.accessToken == $0 } ?? (cached.resource == resource)
            }
            if token != nil || resource != nil, let index = session.resourceTokens.firstIndex(where: match) {
                // A token for one API (a git server's): that one is spent, nothing else.
                guard session.resourceTokens[index].expiresAt > now else { return false }
                session.resourceTokens[index].expiresAt = now
                try locked.save(session)
                return true
            }
            guard resource == nil || token != nil, token == nil || session.accessToken == token else { return false }
            guard session.expiresAt > now else { return false }
            session.expiresAt = now
            try locked.save(session)
            return true
        }
    }

    /// Spends `session`'s refresh token and stores the rotated session; the caller holds the lock.
    func refresh(_ session: Session, locked: any LockedTokenCache) async throws(SessionError) -> Session {
        guard let refreshToken = session.refreshToken else {
            try drop(locked)
            throw .rejected(key, reason: "the access token expired and the session has no refresh token")
        }
        let response: SessionResponse
        do {
            response = try await api.refresh(refreshToken)
        } catch let error where error.isAuthenticationRefusal {
            // Another writer (one not using this lock: another machine sharing the folder, an older
            // client) may have rotated the token just now. Adopt its session rather than drop it.
            if let stored = try? locked.session(for: key), stored.refreshToken != refreshToken {
                return stored
            }
            try drop(locked)
            throw .rejected(key, reason: error.description)
        } catch {
            throw .broker(error)
        }
        let now = clock.seconds()
        var renewed = response.session(key: key, now: now)
        // The APIs' tokens stay good until they expire: the rotation does not end them.
        renewed.resourceTokens = session.resourceTokens.filter { $0.expiresAt > now }
        return try cacheStep { () throws(TokenCacheError) in try locked.save(renewed) }
    }

    /// An account token for one account change (link, unlink, password change, account delete or export): the
    /// refresh grant with `scope=account`, under the store's lock like any refresh (a `broker token` running at
    /// the same moment waits, so neither presents a spent refresh token). The rotated refresh token is stored;
    /// the cached access token stays as it was — the account token is never cached, never printed and never
    /// sent anywhere but the broker's account endpoints. Returns it with the session as now stored.
    package func accountToken() async throws(SessionError) -> (token: Secret, session: Session) {
        let (response, kept) = try await sideGrant(scope: "account", resource: nil)
        return (response.accessToken, kept)
    }

    /// A token for one API (RFC 8707 `resource`: its `aud` is that API's URL, which the broker must have
    /// registered) valid for `minValid` seconds, as the session viewed through it (``Session/viewed(as:)``).
    ///
    /// Cached per resource beside the session (``Session/resourceTokens``) and got, when missing or too old, by
    /// the refresh grant naming the resource, under the store's lock: single-flight as ``validSession(minValid:)``
    /// (a process that waited for the lock and finds another's fresh token for this resource takes it), so twenty
    /// commands for one API make one refresh. The session's own access token is untouched.
    package func resourceSession(_ resource: String, minValid: Int64) async throws(SessionError) -> Session {
        let seen: Session? = try cacheStep { () throws(TokenCacheError) in try cache.session(for: key) }
        guard let seen else { throw .signedOut(key) }
        if let token = seen.token(for: resource), token.satisfies(minValid: minValid, at: clock.seconds()) {
            return seen.viewed(as: token)
        }
        return try await resourceGrant(resource) { current in
            guard let token = current.token(for: resource) else { return nil }
            let now = clock.seconds()
            if token.accessToken != seen.token(for: resource)?.accessToken && token.expiresAt > now { return token }
            return token.satisfies(minValid: minValid, at: now) ? token : nil
        }
    }

    /// A resource's token after its API refused `rejected` (a 401): a new one even when it still looked valid,
    /// unless another process has just replaced it (the answer then).
    package func renewResource(_ resource: String, rejecting rejected: Secret) async throws(SessionError) -> Session {
        try await resourceGrant(resource) { current in
            guard let token = current.token(for: resource), token.accessToken != rejected,
                token.expiresAt > clock.seconds()
            else { return nil }
            return token
        }
    }

    /// Under the store's lock: the token `reuse` finds in the current session, else one refresh grant naming
    /// `resource`, its token kept beside the session with the rotated refresh token.
    private func resourceGrant(
        _ resource: String, reuse: (Session) -> ResourceToken?
    ) async throws(SessionError) -> Session {
        let locked: any LockedTokenCache = try cacheStep { () throws(TokenCacheError) in try cache.locked() }
        defer { locked.unlock() }
        let current: Session? = try cacheStep { () throws(TokenCacheError) in try locked.session(for: key) }
        guard let current else { throw .signedOut(key) }
        if let token = reuse(current) { return current.viewed(as: token) }
        let (response, kept) = try await sideGrant(scope: nil, resource: resource, locked: locked, current: current)
        let now = clock.seconds()
        let token = ResourceToken(
            resource: resource, accessToken: response.accessToken, expiresAt: now + response.expiresIn,
            obtainedAt: now)
        var stored = kept
        stored.keep(token, now: now)
        stored = try cacheStep { () throws(TokenCacheError) in try locked.save(stored) }
        return stored.viewed(as: token)
    }

    /// A refresh grant for a token the cache does not keep (an account token, a resource's token), under the
    /// store's lock: only the rotated refresh token is stored, beside the cached access token as it was.
    /// Returns the broker's answer and the session as now stored.
    private func sideGrant(scope: String?, resource: String?) async throws(SessionError)
        -> (response: SessionResponse, kept: Session)
    {
        let locked: any LockedTokenCache = try cacheStep { () throws(TokenCacheError) in try cache.locked() }
        defer { locked.unlock() }
        let current: Session? = try cacheStep { () throws(TokenCacheError) in try locked.session(for: key) }
        guard let current else { throw .signedOut(key) }
        return try await sideGrant(scope: scope, resource: resource, locked: locked, current: current)
    }

    /// The same with the lock held and the session read.
    private func sideGrant(scope: String?, resource: String?, locked: any LockedTokenCache, current: Session)
        async throws(SessionError) -> (response: SessionResponse, kept: Session)
    {
        guard let refreshToken = current.refreshToken else {
            throw .rejected(key, reason: "the session has no refresh token; sign in again (broker login)")
        }
        let response: SessionResponse
        do {
            response = try await api.refresh(refreshToken, scope: scope, resource: resource)
        } catch let error where error.isAuthenticationRefusal {
            try drop(locked)
            throw .rejected(key, reason: error.description)
        } catch {
            throw .broker(error)
        }
        var kept = current
        kept.refreshToken = response.refreshToken ?? current.refreshToken
        kept = try cacheStep { () throws(TokenCacheError) in try locked.save(kept) }
        return (response, kept)
    }

    /// Runs a credential-store operation, reporting its failure as ``SessionError/cache(_:)``.
    private func cacheStep<T>(_ body: () throws(TokenCacheError) -> T) throws(SessionError) -> T {
        do {
            return try body()
        } catch {
            throw .cache(error)
        }
    }

    /// Removes this profile's session (the broker refused it).
    func drop(_ locked: any LockedTokenCache) throws(SessionError) {
        try cacheStep { () throws(TokenCacheError) in try locked.remove(key) }
    }

    /// Stores a new session from a sign-in.
    package func store(_ response: SessionResponse) throws(SessionError) -> Session {
        let session = response.session(key: key, now: clock.seconds())
        return try cacheStep { () throws(TokenCacheError) in
            let locked = try cache.locked()
            defer { locked.unlock() }
            return try locked.save(session)
        }
    }

    /// Removes the session after the broker said it is no longer valid (a 401 to its access token).
    package func forget() throws(SessionError) {
        try cacheStep { () throws(TokenCacheError) in
            let locked = try cache.locked()
            defer { locked.unlock() }
            try locked.remove(key)
        }
    }

    /// `broker logout`: revokes at the broker (best effort, short timeout) and deletes locally. Returns
    /// the removed session, if there was one, and why the broker could not be told (if it could not).
    package func logout() async throws(SessionError) -> (removed: Session?, revokeProblem: String?) {
        let locked: any LockedTokenCache = try cacheStep { () throws(TokenCacheError) in try cache.locked() }
        defer { locked.unlock() }
        var problem: String?
        let session: Session?
        do {
            session = try locked.session(for: key)
        } catch .keyring(let reason) {
            // The keyring holding the refresh token cannot be read: sign out here anyway (the access token is
            // revoked instead), and say what is left in the keyring.
            session = try cacheStep { () throws(TokenCacheError) in try locked.sessions().first { $0.key == key } }
            problem = reason + "; its items stay in the keyring until it can be opened (broker logout again)"
        } catch {
            throw .cache(error)
        }
        guard let session else { return (nil, nil) }
        var quick = api
        quick.timeout = min(quick.timeout, .seconds(3))
        do {
            try await quick.revoke(session.refreshToken ?? session.accessToken)
        } catch {
            problem = [problem, error.description].compactMap { $0 }.joined(separator: "; ")
        }
        try drop(locked)
        return (session, problem)
    }
}
