import Foundation
import Synchronization

/// A fixed set of threads for password hashing, with a bounded queue.
///
/// scrypt at OWASP's cost takes a few hundred milliseconds and 128 MiB per hash. Run on Swift's cooperative
/// pool it would block the threads every other request needs; with an unbounded queue a login flood would
/// grow memory and latency without limit. Here at most `workers` hashes run at once, at most `queueLimit`
/// wait, and beyond that ``run(_:)`` fails at once with ``Busy`` (the caller answers 429 + Retry-After), so
/// `/auth/me`, refresh and the JWKS keep answering whatever logins do.
package final class HashingPool: Sendable {
    /// The pool and its queue are full.
    package struct Busy: Error {}

    private struct State {
        var jobs: [@Sendable () -> Void] = []
        var head = 0
        var running = 0
        var stopped = false
        var queued: Int { jobs.count - head }
    }

    let workers: Int
    let queueLimit: Int
    private let state = Mutex(State())
    private let available = DispatchSemaphore(value: 0)
    private let metrics: BrokerMetrics?

    package init(workers: Int, queueLimit: Int, metrics: BrokerMetrics? = nil) {
        self.metrics = metrics
        self.workers = max(1, workers)
        self.queueLimit = max(0, queueLimit)
        for index in 0..<self.workers {
            let thread = Thread { [self] in self.workLoop() }
            thread.name = "broker-hash-\(index)"
            thread.start()
        }
    }

    /// Runs `work` on a pool thread, or throws ``Busy`` at once when every thread is busy and the queue full.
    package func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let accepted = state.withLock { state -> Bool in
                guard !state.stopped, state.queued < queueLimit + max(0, workers - state.running) else {
                    return false
                }
                let queuedAt = ContinuousClock.now
                state.jobs.append { [metrics] in
                    metrics?.hashing(waited: ContinuousClock.now - queuedAt)
                    continuation.resume(with: Result { try work() })
                }
                return true
            }
            if accepted {
                available.signal()
            } else {
                continuation.resume(throwing: Busy())
            }
        }
    }

    /// Jobs waiting plus jobs running (for tests).
    package var load: Int { state.withLock { $0.queued + $0.running } }

    /// Jobs waiting for a thread (the queue-depth metric).
    var queued: Int { state.withLock { $0.queued } }

    private func workLoop() {
        while true {
            available.wait()
            let job = state.withLock { state -> (@Sendable () -> Void)? in
                guard state.head < state.jobs.count else { return nil }
                let job = state.jobs[state.head]
                state.head += 1
                if state.head > 64 && state.head * 2 > state.jobs.count {
                    state.jobs.removeFirst(state.head)
                    state.head = 0
                }
                state.running += 1
                return job
            }
            guard let job else { continue }
            job()
            state.withLock { $0.running -= 1 }
        }
    }
}
