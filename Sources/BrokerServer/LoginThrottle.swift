import BrokerCore
import Synchronization

/// Growing back-off after failed logins, per account and per client address (on by default).
///
/// After `freeFailures` failures in a row each further failure blocks the key for twice as long as the
/// previous one (1 s, 2 s, 4 s … up to `maxDelay`); a key with no failure for `forgetAfter` starts over.
/// A successful login clears its account but not its address, so a valid account cannot be used to reset
/// an address that is guessing at others. The table is bounded: when full, the oldest entries go first.
final class LoginThrottle: Sendable {
    struct Policy: Sendable {
        var freeFailures: Int
        var baseDelay: Double = 1
        var maxDelay: Double = 900
        var forgetAfter: Double = 900
    }

    private struct Entry {
        var failures = 0
        var lastFailure = 0.0
        var blockedUntil = 0.0
    }

    let accountPolicy: Policy
    let addressPolicy: Policy
    private let clock: any WallClock
    private let maxEntries: Int
    private let entries = Mutex([String: Entry]())

    init(
        account: Policy = Policy(freeFailures: 5),
        address: Policy = Policy(freeFailures: 30),
        maxEntries: Int = 100_000,
        clock: any WallClock
    ) {
        self.accountPolicy = account
        self.addressPolicy = address
        self.maxEntries = maxEntries
        self.clock = clock
    }

    /// Seconds until `account` or `address` may try again, or `nil` when both may try now.
    func retryAfter(account: String, address: String?) -> Double? {
        let time = clock.now()
        return entries.withLock { entries in
            var wait = 0.0
            for key in Self.keys(account: account, address: address) {
                if let entry = entries[key], entry.blockedUntil > time { wait = max(wait, entry.blockedUntil - time) }
            }
            return wait > 0 ? wait : nil
        }
    }

    func recordFailure(account: String, address: String?) {
        let time = clock.now()
        entries.withLock { entries in
            if entries.count >= maxEntries {
                Self.evict(
                    &entries, now: time, forgetAfter: max(accountPolicy.forgetAfter, addressPolicy.forgetAfter),
                    keep: maxEntries / 2)
            }
            for key in Self.keys(account: account, address: address) {
                let policy = key.hasPrefix("a:") ? accountPolicy : addressPolicy
                var entry = entries[key] ?? Entry()
                if time - entry.lastFailure > policy.forgetAfter { entry.failures = 0 }
                entry.failures += 1
                entry.lastFailure = time
                if entry.failures > policy.freeFailures {
                    let exponent = Double(min(entry.failures - policy.freeFailures - 1, 30))
                    let delay = min(policy.baseDelay * pow2(exponent), policy.maxDelay)
                    entry.blockedUntil = time + delay
                }
                entries[key] = entry
            }
        }
    }

    func recordSuccess(account: String) {
        _ = entries.withLock { $0.removeValue(forKey: "a:" + account) }
    }

    private static func keys(account: String, address: String?) -> [String] {
        ["a:" + account] + (address.map { ["i:" + $0] } ?? [])
    }

    /// Forgets what no longer matters, then, if still too many, keeps the most recently failing keys.
    private static func evict(_ entries: inout [String: Entry], now: Double, forgetAfter: Double, keep: Int) {
        entries = entries.filter { $0.value.blockedUntil > now || now - $0.value.lastFailure <= forgetAfter }
        if entries.count > keep {
            let newest = entries.sorted { $0.value.lastFailure > $1.value.lastFailure }.prefix(keep)
            entries = Dictionary(uniqueKeysWithValues: newest.map { ($0.key, $0.value) })
        }
    }
}

private func pow2(_ exponent: Double) -> Double {
    var value = 1.0
    var remaining = Int(exponent)
    while remaining > 0 {
        value *= 2
        remaining -= 1
    }
    return value
}
