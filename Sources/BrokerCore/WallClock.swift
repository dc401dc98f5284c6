import Glibc

/// Where the broker and its CLI read the time: one dependency, injected everywhere time decides something
/// (token expiry, back-off, key rotation, caches, authorization codes, session freshness).
///
/// Production code uses ``SystemClock``; tests use a manual clock they advance, so that crossing a window
/// never means sleeping.
package protocol WallClock: Sendable {
    /// Seconds since 1970-01-01T00:00:00Z, with sub-second precision.
    func now() -> Double
}

extension WallClock {
    /// Whole seconds since the epoch (rounded down), the unit of JWT claims and stored times.
    package func seconds() -> Int64 { Int64(now().rounded(.down)) }
}

/// The system's real-time clock (`CLOCK_REALTIME`).
package struct SystemClock: WallClock {
    package init() {}

    package func now() -> Double {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1_000_000_000
    }
}

extension WallClock where Self == SystemClock {
    /// The system's clock.
    package static var system: SystemClock { SystemClock() }
}
