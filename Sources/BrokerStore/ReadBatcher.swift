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
/// leaves the queue and throws `CancellationError`; one already sent is answered with its batch.
final class ReadBatcher<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    /// Reads the values for `keys` (distinct); a key without a value is simply absent from the answer.
    typealias Fetch = @Sendable (_ keys: [Key]) async throws -> [Key: Value]

    private struct Waiter {
        let id: UInt64
        let key: Key
        let continuation: CheckedContinuation<Value?, any Error>
    }

    private struct State {
        var queued: [Waiter] = []
        var busyLanes = 0
        var nextID: UInt64 = 0
        var batches = 0
        var reads = 0

        /// The oldest `limit` queued reads.
        mutating func take(_ limit: Int) -> [Waiter] {
            let count = min(limit, queued.count)
            let batch = Array(queued.prefix(count))
            queued.removeFirst(count)
            batches += 1
            reads += batch.count
            return batch
        }
    }

    private let state = Mutex(State())
    private let lanes: Int
    private let maxBatch: Int

    /// - Parameters:
    ///   - lanes: how many batches may be in flight at once.
    ///   - maxBatch: the most reads one query answers.
    init(lanes: Int = 1, maxBatch: Int = 64) {
        precondition(lanes >= 1 && maxBatch >= 1)
        self.lanes = lanes
        self.maxBatch = maxBatch
    }

    /// How many queries have been sent and how many reads they answered (for tests and benchmarks).
    var counts: (batches: Int, reads: Int) { state.withLock { ($0.batches, $0.reads) } }

    /// How many reads are queued, not yet sent (for tests).
    var queuedCount: Int { state.withLock { $0.queued.count } }

    /// The value for `key`, read in a batch by `fetch` (the fetch of whichever read starts the lane; every read
    /// of one batcher must pass the same query).
    func read(_ key: Key, fetch: @escaping Fetch) async throws -> Value? {
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
                let batch = state.withLock { state -> [Waiter]? in
                    state.queued.append(Waiter(id: id, key: key, continuation: continuation))
                    guard state.busyLanes < lanes else { return nil }
                    state.busyLanes += 1
                    return state.take(maxBatch)
                }
                if let batch { Task { await self.drive(batch, fetch: fetch) } }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                guard let index = state.queued.firstIndex(where: { $0.id == id }) else { return nil }
                return state.queued.remove(at: index)
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// One lane: answers its batch, then takes whatever queued meanwhile, until nothing is queued.
    private func drive(_ first: [Waiter], fetch: Fetch) async {
        var batch = first
        while true {
            var keys: [Key] = []
            var seen = Set<Key>()
            for waiter in batch where seen.insert(waiter.key).inserted { keys.append(waiter.key) }
            let answer: Result<[Key: Value], any Error>
            do { answer = .success(try await fetch(keys)) } catch { answer = .failure(error) }
            for waiter in batch { waiter.continuation.resume(with: answer.map { $0[waiter.key] }) }
            let next = state.withLock { state -> [Waiter]? in
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
