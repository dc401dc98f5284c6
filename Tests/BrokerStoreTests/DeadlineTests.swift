import BrokerCore
import BrokerPostgres
import BrokerStore
import BrokerTesting
import Logging
import Synchronization
import Testing

/// The deadlines every PostgreSQL call runs under. Nothing here sleeps to cross a window: a deadline's firing is
/// awaited as an event, and what must not fire is shown by the order in which one watch fires its expiries.
@Suite("Store deadlines")
struct DeadlineTests {
    /// Awaits one expiry registered on `watch`, after `duration`.
    private static func expiry(on watch: DeadlineWatch, after duration: Duration) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            _ = watch.watch(for: duration) { continuation.resume() }
        }
    }

    @Test func anExpiryFiresAndTheWatchStopsWhenNothingIsLeft() async {
        let watch = DeadlineWatch(tick: .milliseconds(5))
        #expect(!watch.isTicking, "an idle watch has no task")
        await Self.expiry(on: watch, after: .milliseconds(20))
        #expect(watch.count == 0, "a fired expiry is no longer registered")
        #expect(!watch.isTicking, "the watching task ends with the last expiry")
        await Self.expiry(on: watch, after: .milliseconds(1))
        #expect(!watch.isTicking, "and starts again for the next one")
    }

    @Test func aReleasedExpiryNeverFires() async {
        let watch = DeadlineWatch(tick: .milliseconds(5))
        let fired = Atomic(0)
        let released = watch.watch(for: .milliseconds(10)) { fired.add(1, ordering: .sequentiallyConsistent) }
        #expect(watch.count == 1)
        watch.release(released)
        #expect(watch.count == 0)
        // A later expiry on the same watch: every tick runs all that is due, so the released one, due first,
        // would have fired no later than this one.
        await Self.expiry(on: watch, after: .milliseconds(30))
        #expect(fired.load(ordering: .sequentiallyConsistent) == 0)
    }

    @Test func expiriesFireInTheOrderTheyFallDue() async {
        let watch = DeadlineWatch(tick: .milliseconds(5))
        let (fired, fire) = AsyncStream.makeStream(of: String.self)
        // Both registered before either can fire; however late the watching task runs, it fires the earlier
        // expiry first.
        _ = watch.watch(for: .milliseconds(200)) { fire.yield("late") }
        _ = watch.watch(for: .milliseconds(1)) { fire.yield("early") }
        var order: [String] = []
        for await name in fired {
            order.append(name)
            if order.count == 2 { break }
        }
        #expect(order == ["early", "late"])
    }

    /// The reason the deadline exists: an operation that does not stop (a query on a connection that died
    /// under it ignored its cancellation) must not hold the request. The caller gets 503's error at the deadline
    /// and the operation is cancelled, left to finish by itself. The time limit is a bound for a broken deadline
    /// (the call would never answer), not a measure of speed: a fresh database alone took 14 s while every suite
    /// was creating its own on the same cluster.
    @Test(.hangBound) func aCallThatIgnoresCancellationIsAnsweredAtTheDeadline() async throws {
        let url = try await TestPostgres.freshDatabase()
        guard case .postgres(let location) = try DatabaseLocation.parse(url) else {
            throw TestSupportError("not a PostgreSQL URL: \(url)")
        }
        // The store's own deadline is generous (connecting under a busy test run takes its time); the stuck
        // call gets a short one of its own.
        let store = try await PostgresStore.open(
            location, password: TestPostgres.password, deadline: .seconds(60), logger: Logger.test())
        let gate = Gate()
        let (ended, end) = AsyncStream.makeStream(of: Bool.self)
        let error = await #expect(throws: StoreError.self) {
            try await store.run("stuck call", deadline: .milliseconds(300)) { () -> Int in
                // Waits, deaf to cancellation, until the test has its answer; then reports whether it was cancelled.
                await gate.wait()
                end.yield(Task.isCancelled)
                end.finish()
                return 1
            }
        }
        gate.open()
        #expect(error?.code == .unavailable)
        #expect(error?.reason.contains("did not answer within") == true, "\(String(describing: error))")
        var cancelled: Bool?
        for await value in ended { cancelled = value }
        #expect(cancelled == true, "the operation was told to stop")
        // The store still answers, and its watch holds nothing for calls that finished.
        #expect(try await store.run("answer") { 42 } == 42)
        #expect(store.watchedDeadlines == 0)
        await store.close()
    }
}

/// A wait that ignores cancellation (as a query on a dead connection was seen to), until ``open()``.
private final class Gate: Sendable {
    private struct State {
        var open = false
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let state = Mutex(State())

    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.open { return true }
                state.waiter = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }

    func open() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.open = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }
}
