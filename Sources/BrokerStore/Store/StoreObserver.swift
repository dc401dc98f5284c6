import Synchronization

/// Who hears how long each store call took (the server's metrics). Each store reports from its own choke
/// points — SQLite's pool reads and writes and its session lookups, PostgreSQL's `run` — under the name of
/// the store operation that made the call, so a new facet is timed without a line of forwarding.
package protocol StoreObserver: Sendable {
    /// `operation`: the store method in snake case (`rotate_refresh_token`).
    func storeCall(_ operation: String, duration: Duration)
}

/// The observer a store reports to, set once by whoever serves from it (``Store/observe(_:)``).
package final class StoreObservation: Sendable {
    private let observer = Mutex<(any StoreObserver)?>(nil)
    /// Operation names by the address of the `#function` literal that names them: made once per method.
    private let names = Mutex<[UInt: String]>([:])

    package init() {}

    package func set(_ observer: any StoreObserver) { self.observer.withLock { $0 = observer } }

    /// Runs `body`, reporting its duration under `function`'s operation name when someone listens.
    package func timed<T>(_ function: StaticString, _ body: () async throws -> T) async throws -> T {
        guard let observer = observer.withLock({ $0 }) else { return try await body() }
        let started = ContinuousClock.now
        defer { observer.storeCall(name(function), duration: ContinuousClock.now - started) }
        return try await body()
    }

    /// The synchronous twin (SQLite's session lookup answers on the caller's thread).
    package func timedNow<T>(_ function: StaticString, _ body: () throws -> T) throws -> T {
        guard let observer = observer.withLock({ $0 }) else { return try body() }
        let started = ContinuousClock.now
        defer { observer.storeCall(name(function), duration: ContinuousClock.now - started) }
        return try body()
    }

    private func name(_ function: StaticString) -> String {
        let key = UInt(bitPattern: function.utf8Start)
        if let known = names.withLock({ $0[key] }) { return known }
        let made = Self.operation(function.description)
        names.withLock { $0[key] = made }
        return made
    }

    /// `rotateRefreshToken(hash:nextHash:…)` → `rotate_refresh_token`; a few keep the names the metrics had
    /// before the stores reported them themselves.
    package static func operation(_ function: String) -> String {
        let base = function.prefix { $0 != "(" }
        if let kept = renamed[String(base)] { return kept }
        var name = ""
        for character in base {
            if character.isUppercase {
                if !name.isEmpty { name.append("_") }
                name += character.lowercased()
            } else {
                name.append(character)
            }
        }
        return name
    }

    static let renamed = [
        "signIn": "identity_sign_in", "isStateMarkerSpent": "state_marker", "addFirstSigningKey": "add_signing_key",
        "refundRateLimit": "rate_limit_refund", "attachSession": "attach_app_code_session",
    ]
}
