package import BrokerCore
import BrokerSystem
import Glibc

/// The credential store: one JSON document, `credentials.json` in `BROKER_HOME`.
///
/// ```json
/// {"format": 1, "sessions": [{"broker": "http://127.0.0.1:8787", "profile": "default",
///   "user_id": "custom:…", "provider": "custom", "access_token": "…", "expires_at": 1795412345,
///   "refresh_token": "…", "resources": [{"resource": "https://api.example/mcp", "access_token": "…",
///   "expires_at": 1795412345, "obtained_at": 1795411445}]}]}
/// ```
///
/// `resources` (optional) holds the session's tokens for single APIs (RFC 8707), at most
/// ``ResourceToken/maxPerSession``.
///
/// A session whose long-lived secrets are in the desktop keyring says `"secrets": "keyring"` and has no
/// `refresh_token` here (issue "Keyring"); its short-lived access token stays, so a warm `broker token` is
/// still one file read.
///
/// The folder is 0700 and the file 0600; every write goes to a temporary file that is fsync'd and renamed
/// over the old one, so a reader (which takes no lock) and a crash at any moment both see a whole file.
/// Writers hold `flock` on `credentials.lock` beside it. A file that does not parse, or has another
/// `format`, is renamed to `credentials.json.corrupt-<unix time>` — never overwritten — and reported.
package final class FileTokenCache: TokenCache {
    package let directory: String
    package let path: String
    let lockPath: String
    static let format: Int64 = 1
    static let maxSize = 4 * 1024 * 1024

    package init(directory: String) {
        self.directory = directory
        path = directory + "/credentials.json"
        lockPath = directory + "/credentials.lock"
    }

    package func session(for key: SessionKey) throws(TokenCacheError) -> Session? {
        try sessions().first { $0.key == key }
    }

    /// The session for `key`, read without the lock and without side effects: a store that does not read
    /// cleanly throws and is left where it is (``sessions()`` moves it aside). For the launcher's warm path,
    /// which hands every problem to the full CLI.
    package func peekSession(for key: SessionKey) throws(TokenCacheError) -> Session? {
        try decode(readFile()).first { $0.key == key }
    }

    package func sessions() throws(TokenCacheError) -> [Session] {
        do {
            return try decode(readFile())
        } catch .unreadable {
            // Move the bad file aside under the lock, and only if it is still the bad one: a writer may
            // have replaced it since (then its sessions are the answer).
            let locked = try Locked(cache: self)
            defer { locked.unlock() }
            return try locked.sessions()
        }
    }

    package func locked() throws(TokenCacheError) -> any LockedTokenCache {
        try Locked(cache: self)
    }

    /// The file's bytes, or `nil` when there is no store yet.
    func readFile() throws(TokenCacheError) -> [UInt8]? {
        guard PosixFile.exists(path) else { return nil }
        do {
            return try PosixFile.read(path: path, maxSize: Self.maxSize)
        } catch {
            if !PosixFile.exists(path) { return nil }
            throw .io(path: path, reason: error.reason)
        }
    }

    /// The store file's contents read (`Fuzz/cache`): a damaged file is an error naming what is wrong.
    package func decode(_ bytes: [UInt8]?) throws(TokenCacheError) -> [Session] {
        guard let bytes else { return [] }
        let document: JSONValue
        switch JSONValue.parseReportingError(bytes) {
        case .success(let value): document = value
        case .failure(let error):
            throw .unreadable(path: path, reason: "not JSON: \(error)", movedTo: nil)
        }
        guard case .object(let top) = document else {
            throw .unreadable(path: path, reason: "not a JSON object", movedTo: nil)
        }
        guard let format = top["format"]?.intValue else {
            throw .unreadable(path: path, reason: "no \"format\" number", movedTo: nil)
        }
        guard format == Self.format else {
            throw .unreadable(
                path: path,
                reason: "format \(format); this broker reads format \(Self.format)",
                movedTo: nil
            )
        }
        guard case .array(let entries)? = top["sessions"] else {
            throw .unreadable(path: path, reason: "\"sessions\" is not a list", movedTo: nil)
        }
        var sessions = [Session]()
        for (index, entry) in entries.enumerated() {
            guard let session = Self.session(entry) else {
                throw .unreadable(path: path, reason: "session \(index + 1) is malformed", movedTo: nil)
            }
            sessions.append(session)
        }
        return sessions
    }

    static func session(_ value: JSONValue) -> Session? {
        guard case .object(let fields) = value,
            let broker = fields["broker"]?.stringValue,
            let profile = fields["profile"]?.stringValue,
            let user = fields["user_id"]?.stringValue.flatMap(UserID.init),
            let provider = fields["provider"]?.stringValue.flatMap(ProviderID.init(rawValue:)),
            let access = fields["access_token"]?.stringValue,
            let expiresAt = fields["expires_at"]?.intValue
        else { return nil }
        var refresh: Secret?
        switch fields["refresh_token"] {
        case nil, .null?: refresh = nil
        case .string(let value)?: refresh = Secret(value)
        default: return nil
        }
        var session = Session(
            key: SessionKey(brokerURL: broker, profile: profile),
            userID: user,
            provider: provider,
            accessToken: Secret(access),
            expiresAt: expiresAt,
            refreshToken: refresh,
            obtainedAt: fields["obtained_at"]?.intValue
        )
        switch fields["resources"] {
        case nil: break
        case .array(let items)? where items.count <= ResourceToken.maxPerSession:
            for item in items {
                guard case .object(let entry) = item, let resource = entry["resource"]?.stringValue,
                    let token = entry["access_token"]?.stringValue, let expires = entry["expires_at"]?.intValue,
                    session.token(for: resource) == nil
                else { return nil }
                session.resourceTokens.append(
                    ResourceToken(
                        resource: resource, accessToken: Secret(token), expiresAt: expires,
                        obtainedAt: entry["obtained_at"]?.intValue))
            }
        default: return nil
        }
        switch fields["secrets"] {
        case nil, .string("file")?: break
        case .string("keyring")?:
            // The refresh token is in the keyring; one here as well would be a leftover nobody should trust.
            guard refresh == nil else { return nil }
            session.secretsInKeyring = true
        default: return nil
        }
        return session
    }

    package static func encode(_ sessions: [Session]) -> [UInt8] {
        let entries: [JSONValue] = sessions.map { session in
            var fields: [String: JSONValue] = [
                "broker": .string(session.key.brokerURL),
                "profile": .string(session.key.profile),
                "user_id": .string(session.userID.description),
                "provider": .string(session.provider.rawValue),
                "access_token": .string(session.accessToken.exposed),
                "expires_at": .int(session.expiresAt),
            ]
            if session.secretsInKeyring {
                fields["secrets"] = "keyring"
            } else if let refresh = session.refreshToken {
                fields["refresh_token"] = .string(refresh.exposed)
            }
            if let obtainedAt = session.obtainedAt { fields["obtained_at"] = .int(obtainedAt) }
            if !session.resourceTokens.isEmpty {
                fields["resources"] = .array(
                    session.resourceTokens.map { token in
                        var entry: [String: JSONValue] = [
                            "resource": .string(token.resource), "access_token": .string(token.accessToken.exposed),
                            "expires_at": .int(token.expiresAt),
                        ]
                        if let obtainedAt = token.obtainedAt { entry["obtained_at"] = .int(obtainedAt) }
                        return .object(entry)
                    })
            }
            return .object(fields)
        }
        var bytes = JSONValue.object(["format": .int(format), "sessions": .array(entries)]).serializedBytes
        bytes.append(UInt8(ascii: "\n"))
        return bytes
    }

    /// The store under its lock.
    final class Locked: LockedTokenCache {
        let cache: FileTokenCache
        private var lock: FileLock?

        init(cache: FileTokenCache) throws(TokenCacheError) {
            self.cache = cache
            do {
                try PosixFile.ensurePrivateDirectory(cache.directory)
                lock = try FileLock(path: cache.lockPath)
            } catch {
                throw .io(path: error.path, reason: error.reason)
            }
            removeStaleTemporaryFiles()
        }

        func sessions() throws(TokenCacheError) -> [Session] {
            do {
                return try cache.decode(cache.readFile())
            } catch .unreadable(let path, let reason, _) {
                let moved: String
                do {
                    moved = try PosixFile.moveAside(path, suffix: "corrupt-\(Int64(time(nil)))")
                } catch {
                    throw .io(path: path, reason: "\(reason), and it cannot be moved aside: \(error.reason)")
                }
                throw .unreadable(path: path, reason: reason, movedTo: moved)
            }
        }

        func session(for key: SessionKey) throws(TokenCacheError) -> Session? {
            try sessions().first { $0.key == key }
        }

        @discardableResult
        func save(_ session: Session) throws(TokenCacheError) -> Session {
            var all = try sessions()
            if let index = all.firstIndex(where: { $0.key == session.key }) {
                all[index] = session
            } else {
                all.append(session)
            }
            try write(all)
            return session
        }

        func remove(_ key: SessionKey) throws(TokenCacheError) {
            let all = try sessions()
            let kept = all.filter { $0.key != key }
            if kept.count != all.count { try write(kept) }
        }

        private func write(_ sessions: [Session]) throws(TokenCacheError) {
            precondition(lock != nil, "the credential store is written only under its lock")
            do {
                try PosixFile.writeAtomically(FileTokenCache.encode(sessions), to: cache.path, mode: 0o600)
            } catch {
                throw .io(path: error.path, reason: error.reason)
            }
        }

        /// A writer killed between creating its temporary file and renaming it leaves the temporary
        /// behind. Every writer holds the lock, so while we hold it any such file is an orphan.
        private func removeStaleTemporaryFiles() {
            guard let dir = opendir(cache.directory) else { return }
            defer { closedir(dir) }
            let prefix = "credentials.json.tmp-"
            while let entry = readdir(dir) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
                }
                if name.hasPrefix(prefix) { unlink(cache.directory + "/" + name) }
            }
        }

        func unlock() {
            lock?.unlock()
            lock = nil
        }

        deinit { unlock() }
    }
}
