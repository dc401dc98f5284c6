import Synchronization

/// Concurrent reads by key, answered by one query per batch instead of one query each.
///
/// A read that finds a free lane starts a batch at once, so a lone request waits for nothing. Reads that
/// arrive while every lane is busy queue up, and the next lane to finish takes all of them (up to `maxBatch`)
/// into one query. Under load a batch holds about as many reads as arrived during one round trip, so the
/// database and the client library spend one statement's work on many requests; at rest it is one query per
/// read, as before.
///
/// What a read sees is what it would see alone: its query is sent after the read began (a read never joins a
/// batch already sent), so every transaction committed before the request arrived (a revocation, say) is
/// visible to it. A failed batch fails every read in it with the same error. A read cancelled while it queues
/// leaves the queue and throws `CancellationError`; one already sent is answered with its batch. With a
/// deadline, a read is answered by then whatever it is waiting for (its place in the queue, or a batch that
/// does not answer): queueing behind a stuck batch does not add a second deadline to the first.
/// How long a batched read may wait in all, where its expiry is kept, and what it throws then.
package struct ReadDeadline: Sendable {
    let duration: Duration
    let watch: DeadlineWatch
    let error: @Sendable () -> any Error

    package init(duration: Duration, watch: DeadlineWatch, error: @escaping @Sendable () -> any Error) {
        self.duration = duration
        self.watch = watch
        self.error = error
    }
}

package final class ReadBatcher<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    /// Reads the values for `keys` (distinct); a key without a value is simply absent from the answer.
    package typealias Fetch = @Sendable (_ keys: [Key]) async throws -> [Key: Value]

    private struct Waiter {
        let key: Key
        let continuation: CheckedContinuation<Value?, any Error>
        let expiry: UInt64?
    }

    private struct State {
        /// Every read not yet answered.
        var waiting: [UInt64: Waiter] = [:]
        /// The reads not yet sent, oldest first.
        var queued: [UInt64] = []
        var busyLanes = 0
        var nextID: UInt64 = 0
        var batches = 0
        var reads = 0

        /// The oldest `limit` queued reads.
        mutating func take(_ limit: Int) -> [(id: UInt64, key: Key)] {
            let ids = queued.prefix(limit)
            queued.removeFirst(ids.count)
            batches += 1
            reads += ids.count
            return ids.compactMap { id in waiting[id].map { (id, $0.key) } }
        }
    }

    private let state = Mutex(State())
    private let lanes: Int
    private let maxBatch: Int
    private let deadline: ReadDeadline?

    /// - Parameters:
    ///   - lanes: how many batches may be in flight at once.
    ///   - maxBatch: the most reads one query answers.
    ///   - deadline: how long a read may take in all; `nil` for no limit of the batcher's own.
    package init(lanes: Int = 1, maxBatch: Int = 64, deadline: ReadDeadline? = nil) {
        precondition(lanes >= 1 && maxBatch >= 1)
        self.lanes = lanes
        self.maxBatch = maxBatch
        self.deadline = deadline
    }

    /// How many queries have been sent and how many reads they answered (for tests and benchmarks).
    package var counts: (batches: Int, reads: Int) { state.withLock { ($0.batches, $0.reads) } }

    /// How many reads are queued, not yet sent (for tests).
    package var queuedCount: Int { state.withLock { $0.queued.count } }

    /// How many reads are not yet answered (for tests).
    package var waitingCount: Int { state.withLock { $0.waiting.count } }

    /// The value for `key`, read in a batch by `fetch` (the fetch of whichever read starts the lane; every read
    /// of one batcher must pass the same query).
    package func read(_ key: Key, fetch: @escaping Fetch) async throws -> Value? {
        let id = state.withLock { state in
            state.nextID &+= 1
            return state.nextID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                    return
                }
                let batch = state.withLock { state -> [(id: UInt64, key: Key)]? in
                    // Registered under the lock, so the expiry cannot look for the read before it is there.
                    let expiry = deadline.map { deadline in
                        deadline.watch.watch(for: deadline.duration) { self.expire(id) }
                    }
                    state.waiting[id] = Waiter(key: key, continuation: continuation, expiry: expiry)
                    state.queued.append(id)
                    guard state.busyLanes < lanes else { return nil }
                    state.busyLanes += 1
                    return state.take(maxBatch)
                }
                if let batch { Task { await self.drive(batch, fetch: fetch) } }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                guard let index = state.queued.firstIndex(of: id) else { return nil }
                state.queued.remove(at: index)
                return state.waiting.removeValue(forKey: id)
            }
            if let waiter { answer(waiter, with: .failure(CancellationError())) }
        }
    }

    /// A read's deadline passed: it leaves the queue if it is there, and is answered with the deadline's error
    /// (its batch's answer, if one comes later, finds it gone).
    private func expire(_ id: UInt64) {
        let waiter = state.withLock { state -> Waiter? in
            if let index = state.queued.firstIndex(of: id) { state.queued.remove(at: index) }
            return state.waiting.removeValue(forKey: id)
        }
        guard let waiter, let deadline else { return }
        waiter.continuation.resume(throwing: deadline.error())
    }

    private func answer(_ waiter: Waiter, with result: Result<Value?, any Error>) {
        if let expiry = waiter.expiry { deadline?.watch.release(expiry) }
        waiter.continuation.resume(with: result)
    }

    /// One lane: answers its batch, then takes whatever queued meanwhile, until nothing is queued.
    private func drive(_ first: [(id: UInt64, key: Key)], fetch: Fetch) async {
        var batch = first
        while true {
            var keys: [Key] = []
            var seen = Set<Key>()
            for read in batch where seen.insert(read.key).inserted { keys.append(read.key) }
            // Never empty: a lane takes only reads still queued, and a read leaves the queue when it leaves `waiting`.
            let values: Result<[Key: Value], any Error>
            do { values = .success(try await fetch(keys)) } catch { values = .failure(error) }
            let waiters = state.withLock { state in batch.compactMap { state.waiting.removeValue(forKey: $0.id) } }
            for waiter in waiters { answer(waiter, with: values.map { $0[waiter.key] }) }
            let next = state.withLock { state -> [(id: UInt64, key: Key)]? in
                guard !state.queued.isEmpty else {
                    state.busyLanes -= 1
                    return nil
                }
                return state.take(maxBatch)
            }
            guard let next else { return }
            batch = next
        }
    }
}
