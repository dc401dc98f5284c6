import Synchronization

/// The deadlines of a store's calls, watched by one task for all of them.
///
/// A timer per call (a task sleeping for the whole deadline) cost a sleeping task and a pending system timer for
/// every query, long after the query had answered; at a few thousand queries a second that was thousands of
/// timers in flight. Here a call registers its expiry and its expiry action, and takes them back when it
/// finishes; a single task looks at what is registered once a `tick` and runs the actions that are due, earliest
/// first. It runs
/// only while something is registered, so an idle broker has no timer at all. A deadline fires at most one tick
/// late.
package final class DeadlineWatch: Sendable {
    private struct Watched {
        let expiry: ContinuousClock.Instant
        let expire: @Sendable () -> Void
    }

    private struct State {
        var nextID: UInt64 = 0
        var watched: [UInt64: Watched] = [:]
        var ticking = false
    }

    private let state = Mutex(State())
    private let tick: Duration

    package init(tick: Duration = .milliseconds(100)) { self.tick = tick }

    /// Runs `expire` once `duration` from now has passed, unless ``release(_:)`` takes it back first.
    package func watch(for duration: Duration, expire: @escaping @Sendable () -> Void) -> UInt64 {
        let expiry = ContinuousClock.now.advanced(by: duration)
        let (id, start) = state.withLock { state -> (UInt64, Bool) in
            state.nextID &+= 1
            state.watched[state.nextID] = Watched(expiry: expiry, expire: expire)
            let start = !state.ticking
            state.ticking = true
            return (state.nextID, start)
        }
        if start { Task { await self.watch() } }
        return id
    }

    package func release(_ id: UInt64) {
        _ = state.withLock { $0.watched.removeValue(forKey: id) }
    }

    /// How many expiries are registered (for tests).
    package var count: Int { state.withLock { $0.watched.count } }

    /// Whether the watching task is running (for tests: it stops when nothing is registered).
    package var isTicking: Bool { state.withLock { $0.ticking } }

    private func watch() async {
        while true {
            try? await Task.sleep(for: tick)
            let now = ContinuousClock.now
            let (due, more) = state.withLock { state -> ([@Sendable () -> Void], Bool) in
                let due = state.watched.filter { $0.value.expiry <= now }.sorted { $0.value.expiry < $1.value.expiry }
                for (id, _) in due { state.watched[id] = nil }
                if state.watched.isEmpty { state.ticking = false }
                return (due.map(\.value.expire), state.ticking)
            }
            for expire in due { expire() }
            if !more { return }
        }
    }
}
