import BrokerCore
import Synchronization

/// A clock that moves only when a test moves it: windows (expiry, back-off, cache lifetimes, rate limits)
/// are crossed by ``advance(by:)``, never by sleeping.
package final class ManualClock: WallClock {
    private let current: Mutex<Double>

    /// - Parameter start: seconds since the epoch; by default a fixed, realistic moment (2026-01-01).
    package init(start: Double = 1_767_225_600) {
        current = Mutex(start)
    }

    package func now() -> Double { current.withLock { $0 } }

    /// Moves the clock forward (or back, with a negative amount: a wall clock can be set back).
    package func advance(by seconds: Double) {
        current.withLock { $0 += seconds }
    }
}
