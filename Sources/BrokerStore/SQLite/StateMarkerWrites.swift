import GRDB
import Synchronization

/// State markers spent together: the markers that arrive while one write transaction runs are inserted by the
/// next, in one transaction, and each caller learns whether its own insert took.
///
/// Every DPoP-bound request spends its proof's `jti` once it is accepted, and SQLite has one writer: one
/// transaction a marker cost each such request a hop to GRDB's writer queue and a commit, serialized: a DPoP-bound
/// `GET /auth/me` answered a quarter of a Bearer one's rate (`Benchmarks/floor.sh`). A caller still has its answer
/// only after its marker is committed, so a proof is refused the second time by this broker and by any other on
/// the same file, exactly as before; under load one commit carries many markers. A lone marker is written at
/// once, without waiting for company.
final class StateMarkerWrites: Sendable {
    private struct Pending {
        let marker: String
        let expiresAt: Int64
        let answer: CheckedContinuation<Bool, any Error>
    }

    private struct State {
        var pending: [Pending] = []
        var writing = false
    }

    private let state = Mutex(State())
    private let write: @Sendable ([(String, Int64)]) async throws -> [Bool]

    /// `write` inserts the markers in one transaction and says, for each in order, whether it was new.
    init(write: @escaping @Sendable ([(String, Int64)]) async throws -> [Bool]) { self.write = write }

    /// Whether `marker` was new (inserted now), once it is committed.
    func spend(_ marker: String, expiresAt: Int64) async throws -> Bool {
        try await withCheckedThrowingContinuation { answer in
            let start = state.withLock { state in
                state.pending.append(Pending(marker: marker, expiresAt: expiresAt, answer: answer))
                if state.writing { return false }
                state.writing = true
                return true
            }
            if start { Task { await self.drain() } }
        }
    }

    /// Writes batches until none is waiting.
    private func drain() async {
        while true {
            let batch = state.withLock { state in
                let batch = state.pending
                state.pending.removeAll(keepingCapacity: true)
                if batch.isEmpty { state.writing = false }
                return batch
            }
            if batch.isEmpty { return }
            do {
                let fresh = try await write(batch.map { ($0.marker, $0.expiresAt) })
                for (pending, fresh) in zip(batch, fresh) { pending.answer.resume(returning: fresh) }
            } catch {
                for pending in batch { pending.answer.resume(throwing: error) }
            }
        }
    }
}
