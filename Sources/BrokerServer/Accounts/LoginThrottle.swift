package import BrokerCore
import BrokerCrypto
package import BrokerStore
import Synchronization

/// Growing back-off after failed logins, per account, per client address, and per account *and* address
/// (on by default).
///
/// After `freeFailures` failures in a row each further failure blocks the key for twice as long as the
/// previous one (1 s, 2 s, 4 s … up to `maxDelay`); a key with no failure for `forgetAfter` starts over.
///
/// - An attempt is **admitted and counted before the password is hashed** (``admit(account:address:)``), and
///   settled afterwards: a burst of parallel guesses cannot outrun the count (each one sees the ones before
///   it), so a burst gets what a sequence gets — the free failures and the one that starts the block.
/// - A blocked account still lets a **correct password from an address with no recent failure on it**
///   through: someone guessing at an account slows it down for everyone, but cannot lock its owner out.
///   A wrong password from that address is counted and refused like any other.
/// - A successful login clears its account (and the account-and-address pair) and refunds its address's
///   reservation, but never clears the address: a valid account cannot launder an address that guesses at
///   others. The table is bounded: when full, the oldest entries go first.
/// - The table lives in memory for a broker of its own, and **in the store when brokers share one**
///   (``Table/store(_:)``): each decision reads and writes its keys' rows in one transaction that holds them,
///   so a guesser spread over brokers is slowed as if there were one. A reservation older than a minute is
///   dropped (its broker died mid-attempt).
package final class LoginThrottle: Sendable {
    /// Where the counters live.
    package enum Table: Sendable {
        case memory
        case store(any Store)
    }

    package struct Policy: Sendable {
        var freeFailures: Int
        var baseDelay: Double = 1
        var maxDelay: Double = 900
        var forgetAfter: Double = 900
    }

    /// What an attempt may do.
    package enum Admission: Equatable {
        /// Refused for `seconds` more (429).
        case blocked(seconds: Double)
        /// Go ahead; counted as a failure until settled.
        case open
        /// The account is blocked, but this address has no failure on it: only a correct password counts.
        case correctPasswordOnly
        /// As many attempts are in flight as there are failures left before a block: retry shortly (429).
        case busy
    }

    private typealias Entry = ThrottleEntry

    /// How long an admitted attempt may stay unsettled before its reservation is dropped.
    static let reservationLifetime = 60.0

    let accountPolicy: Policy
    let addressPolicy: Policy
    private let clock: any WallClock
    private let maxEntries: Int
    private let table: Table
    private let entries = Mutex([String: Entry]())

    package init(
        account: Policy = Policy(freeFailures: 5),
        address: Policy = Policy(freeFailures: 30),
        maxEntries: Int = 100_000,
        table: Table = .memory,
        clock: any WallClock
    ) {
        self.accountPolicy = account
        self.addressPolicy = address
        self.maxEntries = maxEntries
        self.table = table
        self.clock = clock
    }

    /// Runs `body` on the entries of `keys` (all of them, in memory), atomically.
    private func update<T: Sendable>(
        _ keys: [String], _ body: @escaping @Sendable (inout [String: Entry]) -> T
    ) async throws -> T {
        switch table {
        case .memory: return entries.withLock { body(&$0) }
        case .store(let store): return try await store.updateThrottle(keys: keys, body)
        }
    }

    private static func allKeys(account: String, address: String?) -> [String] {
        [accountKey(account)] + (address.map { [addressKey($0), pairKey(account, $0)] } ?? [])
    }

    /// Keys name an account by its SHA-256: the same length whatever was typed, and no byte (a NUL, say) that
    /// a database's text type would refuse.
    private static func accountKey(_ account: String) -> String { "a:" + digest(account) }
    private static func addressKey(_ address: String) -> String { "i:" + digest(address) }
    private static func pairKey(_ account: String, _ address: String) -> String {
        "p:" + digest(address) + ":" + digest(account)
    }

    private static func digest(_ text: String) -> String {
        Base64URL.encode(Digest.sha256(text))
    }

    /// Seconds until `account` or `address` may try again, or `nil` when both may try now (no reservation).
    package func retryAfter(account: String, address: String?) async throws -> Double? {
        let time = clock.now()
        return try await update(Self.allKeys(account: account, address: address)) { entries in
            var wait = 0.0
            for key in [Self.accountKey(account)] + (address.map { [Self.addressKey($0)] } ?? []) {
                if let entry = entries[key], entry.blockedUntil > time { wait = max(wait, entry.blockedUntil - time) }
            }
            return wait > 0 ? wait : nil
        }
    }

    /// Decides whether an attempt may go on and, when it may, holds its place until
    /// ``settle(account:address:succeeded:)``: attempts in flight count against the free failures, so a burst
    /// of parallel guesses gets what a sequence gets.
    package func admit(account: String, address: String?) async throws -> Admission {
        let time = clock.now()
        let accountPolicy = accountPolicy
        let addressPolicy = addressPolicy
        return try await update(Self.allKeys(account: account, address: address)) { [self] entries in
            func current(_ key: String, _ policy: Policy) -> Entry {
                var entry = entries[key] ?? Entry()
                if time - entry.lastFailure > policy.forgetAfter && entry.blockedUntil <= time { entry.failures = 0 }
                if entry.inFlight > 0 && time - entry.inFlightSince > Self.reservationLifetime { entry.inFlight = 0 }
                return entry
            }
            func wait(_ entry: Entry) -> Double { entry.blockedUntil > time ? entry.blockedUntil - time : 0 }
            let accountEntry = current(Self.accountKey(account), accountPolicy)
            var admission = Admission.open
            if let address {
                let addressEntry = current(Self.addressKey(address), addressPolicy)
                let pairEntry = current(Self.pairKey(account, address), accountPolicy)
                let longest = max(wait(addressEntry), wait(pairEntry))
                if longest > 0 { return .blocked(seconds: longest) }
                if wait(accountEntry) > 0 {
                    // Only an address with no recent failure on this account is let through, and only for a
                    // correct password (settle decides).
                    guard pairEntry.failures == 0 else { return .blocked(seconds: wait(accountEntry)) }
                    admission = .correctPasswordOnly
                }
            } else if wait(accountEntry) > 0 {
                return .blocked(seconds: wait(accountEntry))
            }
            let held = keys(account: account, address: address, admission: admission)
            // Attempts in flight could all be failures: no more may be outstanding than would reach a block
            // (and past the free failures, one at a time).
            for (key, policy) in held {
                let entry = current(key, policy)
                if entry.inFlight >= max(1, policy.freeFailures + 1 - entry.failures) { return .busy }
            }
            makeRoom(&entries, now: time)
            for (key, policy) in held {
                var entry = current(key, policy)
                entry.inFlight += 1
                entry.inFlightSince = time
                entries[key] = entry
            }
            return admission
        }
    }

    /// The keys an admission holds a place in: a correct-password-only attempt does not touch the account
    /// (its block is not extended), only the address and the account-and-address pair.
    private func keys(account: String, address: String?, admission: Admission) -> [(String, Policy)] {
        Self.keys(
            account: account, address: address, admission: admission, accountPolicy: accountPolicy,
            addressPolicy: addressPolicy)
    }

    private static func keys(
        account: String, address: String?, admission: Admission, accountPolicy: Policy, addressPolicy: Policy
    ) -> [(String, Policy)] {
        var keys: [(String, Policy)] = admission == .open ? [(Self.accountKey(account), accountPolicy)] : []
        if let address {
            keys += [(Self.addressKey(address), addressPolicy), (Self.pairKey(account, address), accountPolicy)]
        }
        return keys
    }

    /// Settles an admitted attempt: a failure is counted on every key it held (a block it starts runs from
    /// now); a success clears the account and the pair. The address is never cleared by a success.
    ///
    /// Settling an `.open` attempt that was never admitted simply counts the verdict: that is how a failure
    /// or a success is recorded directly.
    package func settle(account: String, address: String?, admission: Admission, succeeded: Bool) async throws {
        let time = clock.now()
        try await update(Self.allKeys(account: account, address: address)) { [self] entries in
            makeRoom(&entries, now: time)
            for (key, policy) in keys(account: account, address: address, admission: admission) {
                var entry = entries[key] ?? Entry()
                entry.inFlight = max(0, entry.inFlight - 1)
                if !succeeded {
                    if time - entry.lastFailure > policy.forgetAfter { entry.failures = 0 }
                    entry.failures += 1
                    entry.lastFailure = time
                    if entry.failures > policy.freeFailures {
                        entry.blockedUntil = time + Self.delay(entry.failures, policy)
                    }
                }
                entries[key] = entry
            }
            if succeeded {
                entries[Self.accountKey(account)] = nil
                if let address { entries[Self.pairKey(account, address)] = nil }
            }
        }
    }

    /// Gives an admitted attempt's place back without a verdict (the server was too busy to check it).
    package func refund(account: String, address: String?, admission: Admission) async throws {
        try await update(Self.allKeys(account: account, address: address)) { [self] entries in
            for (key, _) in keys(account: account, address: address, admission: admission) {
                guard var entry = entries[key] else { continue }
                entry.inFlight = max(0, entry.inFlight - 1)
                entries[key] = entry
            }
        }
    }

    /// Keeps the table bounded before keys are added: when full, what no longer matters goes, then the oldest.
    private func makeRoom(_ entries: inout [String: Entry], now: Double) {
        // The store's table is kept small by purging (entries the store holds are only this call's keys).
        guard case .memory = table, entries.count >= maxEntries else { return }
        Self.evict(
            &entries, now: now, forgetAfter: max(accountPolicy.forgetAfter, addressPolicy.forgetAfter),
            keep: maxEntries / 2)
    }

    /// The block after `failures` failures: doubling from `baseDelay`, capped at `maxDelay`.
    private static func delay(_ failures: Int, _ policy: Policy) -> Double {
        let exponent = Double(min(failures - policy.freeFailures - 1, 30))
        return min(policy.baseDelay * pow2(exponent), policy.maxDelay)
    }

    /// Forgets what no longer matters, then, if still too many, keeps the most recently failing keys.
    private static func evict(_ entries: inout [String: Entry], now: Double, forgetAfter: Double, keep: Int) {
        entries = entries.filter {
            $0.value.inFlight > 0 || $0.value.blockedUntil > now || now - $0.value.lastFailure <= forgetAfter
        }
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
