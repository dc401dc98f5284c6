/// What keeps anonymous refusals from filling the audit store (attack review RT2-13): every refused request
/// that names no user — a wrong password for an unknown address, a replayed code, an unknown user code — used to
/// add a permanent row, so anyone could grow the database at the speed they could send requests.
///
/// Per (event, source network) the first `burst` such events of a `window` are stored as they are; the rest are
/// counted, and when the window ends one summary row says how many there were, from when to when. Events that
/// name a user, and successes, are never folded. The table is bounded: when it is full the oldest window closes
/// early (its summary written), so memory stays flat under any number of addresses. A pure value: tested on
/// numbers, and held under the trail's lock.
package struct AuditAggregator {
    package struct Summary: Equatable {
        var event: String
        var network: String
        /// Events folded into this summary (not stored one by one).
        package var count: Int
        var from: Int64
        var until: Int64

        package init(event: String, network: String, count: Int, from: Int64, until: Int64) {
            self.event = event
            self.network = network
            self.count = count
            self.from = from
            self.until = until
        }
    }

    private struct Window {
        var start: Int64
        var stored: Int
        var folded: Int
        var lastFolded: Int64
    }

    let burst: Int
    let window: Int64
    let maxKeys: Int
    private var windows: [String: Window] = [:]
    /// The earliest moment a window ends: no scan before it.
    private var nextEnd = Int64.max

    package init(burst: Int = 5, window: Int64 = 600, maxKeys: Int = 10_000) {
        self.burst = burst
        self.window = window
        self.maxKeys = maxKeys
    }

    /// Whether this event is stored on its own, and the summaries of windows that have ended by `now`.
    package mutating func admit(event: String, network: String, now: Int64) -> (store: Bool, summaries: [Summary]) {
        var summaries = due(now: now)
        let key = event + "\u{0}" + network
        if var open = windows[key] {
            if open.stored < burst {
                open.stored += 1
                windows[key] = open
                return (true, summaries)
            }
            open.folded += 1
            open.lastFolded = now
            windows[key] = open
            return (false, summaries)
        }
        if windows.count >= maxKeys, let oldest = windows.min(by: { $0.value.start < $1.value.start }) {
            windows[oldest.key] = nil
            if let summary = Self.summary(key: oldest.key, oldest.value) { summaries.append(summary) }
        }
        windows[key] = Window(start: now, stored: 1, folded: 0, lastFolded: now)
        nextEnd = min(nextEnd, now + window)
        return (true, summaries)
    }

    /// The summaries of windows that ended by `now`, their windows closed.
    package mutating func due(now: Int64) -> [Summary] {
        guard now >= nextEnd else { return [] }
        var summaries: [Summary] = []
        var earliest = Int64.max
        for (key, open) in windows {
            if open.start + window <= now {
                windows[key] = nil
                if let summary = Self.summary(key: key, open) { summaries.append(summary) }
            } else {
                earliest = min(earliest, open.start + window)
            }
        }
        nextEnd = earliest
        return summaries.sorted { ($0.from, $0.event, $0.network) < ($1.from, $1.event, $1.network) }
    }

    /// Every open window's summary, the windows closed (before the process exits).
    package mutating func drain() -> [Summary] {
        due(now: .max)
    }

    private static func summary(key: String, _ open: Window) -> Summary? {
        guard open.folded > 0 else { return nil }
        let parts = key.split(separator: "\u{0}", maxSplits: 1, omittingEmptySubsequences: false)
        return Summary(
            event: String(parts[0]), network: parts.count > 1 ? String(parts[1]) : "", count: open.folded,
            from: open.start, until: open.lastFolded)
    }
}
