import BrokerPostgres
import BrokerStore
import BrokerTesting
import Synchronization
import Testing

/// The batching behind PostgreSQL's session reads. The fetch here is scripted: each batch reports its keys, then
/// waits until the test lets it answer, so which reads share a query is decided by the test, not by how fast the
/// machine is. Nothing sleeps; the time limits only bound a hang.
@Suite("Read batching")
struct ReadBatcherTests {
    /// A fetch the test drives: `started` yields each batch's keys, and a batch answers only once released.
    /// Key "fail" fails its batch; key "missing" has no value; any other key's value is "value of KEY".
    final class ScriptedFetch: Sendable {
        let started: AsyncStream<[String]>
        private let sink: AsyncStream<[String]>.Continuation
        private let gate = Mutex<(waiting: [CheckedContinuation<Void, Never>], permits: Int)>(([], 0))

        init() { (started, sink) = AsyncStream.makeStream(of: [String].self) }

        func fetch(_ keys: [String]) async throws -> [String: String] {
            sink.yield(keys)
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let go = gate.withLock { gate -> Bool in
                    if gate.permits > 0 {
                        gate.permits -= 1
                        return true
                    }
                    gate.waiting.append(continuation)
                    return false
                }
                if go { continuation.resume() }
            }
            if keys.contains("fail") { throw TestSupportError("the batch failed") }
            var values: [String: String] = [:]
            for key in keys where key != "missing" { values[key] = "value of \(key)" }
            return values
        }

        /// Lets one batch (waiting now or the next to come) answer.
        func release() {
            let waiter = gate.withLock { gate -> CheckedContinuation<Void, Never>? in
                if gate.waiting.isEmpty {
                    gate.permits += 1
                    return nil
                }
                return gate.waiting.removeFirst()
            }
            waiter?.resume()
        }
    }

    /// Waits (yielding, not sleeping) until `condition` holds.
    private static func until(_ condition: () -> Bool) async {
        while !condition() { await Task.yield() }
    }

    @Test(.hangBound) func aLoneReadIsSentAtOnceWithItsOwnKey() async throws {
        let batcher = ReadBatcher<String, String>()
        let script = ScriptedFetch()
        async let value = batcher.read("a", fetch: script.fetch)
        var batches = script.started.makeAsyncIterator()
        #expect(await batches.next() == ["a"])
        script.release()
        #expect(try await value == "value of a")
        script.release()
        #expect(try await batcher.read("missing", fetch: script.fetch) == nil, "a key the fetch lacks reads as nil")
        #expect(batcher.counts == (2, 2))
    }

    @Test(.hangBound) func readsThatArriveWhileTheLaneIsBusyShareTheNextQuery() async throws {
        let batcher = ReadBatcher<String, String>(lanes: 1)
        let script = ScriptedFetch()
        var batches = script.started.makeAsyncIterator()
        try await withThrowingTaskGroup(of: (String, String?).self) { group in
            group.addTask { ("a", try await batcher.read("a", fetch: script.fetch)) }
            #expect(await batches.next() == ["a"])
            // The lane is busy with "a": these queue, "b" twice.
            for key in ["b", "c", "missing", "b"] {
                group.addTask { (key, try await batcher.read(key, fetch: script.fetch)) }
            }
            await Self.until { batcher.queuedCount == 4 }
            script.release()
            let second = await batches.next() ?? []
            #expect(second.sorted() == ["b", "c", "missing"], "one query, each key once")
            script.release()
            var answers: [String: [String?]] = [:]
            for try await (key, value) in group { answers[key, default: []].append(value) }
            #expect(answers["a"] == ["value of a"])
            #expect(answers["b"] == ["value of b", "value of b"], "both reads of one key get its value")
            #expect(answers["c"] == ["value of c"])
            #expect(answers["missing"] == [nil])
        }
        #expect(batcher.counts == (2, 5), "five reads in two queries")
        #expect(batcher.queuedCount == 0)
    }

    @Test(.hangBound) func aBatchHoldsAtMostMaxBatchReads() async throws {
        let batcher = ReadBatcher<String, String>(lanes: 1, maxBatch: 2)
        let script = ScriptedFetch()
        var batches = script.started.makeAsyncIterator()
        try await withThrowingTaskGroup(of: String?.self) { group in
            group.addTask { try await batcher.read("first", fetch: script.fetch) }
            #expect(await batches.next() == ["first"])
            for key in ["k1", "k2", "k3", "k4", "k5"] {
                group.addTask { try await batcher.read(key, fetch: script.fetch) }
            }
            await Self.until { batcher.queuedCount == 5 }
            var sizes: [Int] = []
            for _ in 0..<3 {
                script.release()
                sizes.append((await batches.next() ?? []).count)
            }
            script.release()
            var answered = 0
            for try await value in group where value != nil { answered += 1 }
            #expect(sizes == [2, 2, 1])
            #expect(answered == 6)
        }
    }

    @Test(.hangBound) func aFailedBatchFailsEachOfItsReadsAndTheNextBatchIsServed() async throws {
        let batcher = ReadBatcher<String, String>(lanes: 1)
        let script = ScriptedFetch()
        var batches = script.started.makeAsyncIterator()
        async let blocker = batcher.read("first", fetch: script.fetch)
        #expect(await batches.next() == ["first"])
        let failing = Task { try await batcher.read("fail", fetch: script.fetch) }
        let sharing = Task { try await batcher.read("x", fetch: script.fetch) }
        await Self.until { batcher.queuedCount == 2 }
        script.release()
        #expect(try await blocker == "value of first")
        #expect((await batches.next() ?? []).sorted() == ["fail", "x"])
        script.release()
        await #expect(throws: TestSupportError.self) { try await failing.value }
        await #expect(throws: TestSupportError.self, "a read shares its batch's failure") { try await sharing.value }
        // The lane is free again and the batcher still works.
        script.release()
        #expect(try await batcher.read("after", fetch: script.fetch) == "value of after")
    }

    @Test(.hangBound) func aQueuedReadThatIsCancelledLeavesTheQueueAndIsNeverSent() async throws {
        let batcher = ReadBatcher<String, String>(lanes: 1)
        let script = ScriptedFetch()
        var batches = script.started.makeAsyncIterator()
        async let blocker = batcher.read("first", fetch: script.fetch)
        #expect(await batches.next() == ["first"])
        let cancelled = Task { try await batcher.read("cancelled", fetch: script.fetch) }
        async let kept = batcher.read("kept", fetch: script.fetch)
        await Self.until { batcher.queuedCount == 2 }
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(batcher.queuedCount == 1, "the cancelled read left the queue while the lane was still busy")
        script.release()
        #expect(try await blocker == "value of first")
        #expect(await batches.next() == ["kept"], "the cancelled read was not sent")
        script.release()
        #expect(try await kept == "value of kept")
        // Already cancelled before it starts: answered at once, nothing sent.
        let (go, open) = AsyncStream.makeStream(of: Void.self)
        let early = Task {
            for await _ in go { break }
            return try await batcher.read("early", fetch: script.fetch)
        }
        early.cancel()
        open.finish()
        await #expect(throws: CancellationError.self) { try await early.value }
        #expect(batcher.counts.batches == 2)
    }

    @Test(.hangBound) func eachFreeLaneStartsABatchAtOnce() async throws {
        let batcher = ReadBatcher<String, String>(lanes: 2)
        let script = ScriptedFetch()
        var batches = script.started.makeAsyncIterator()
        async let one = batcher.read("one", fetch: script.fetch)
        #expect(await batches.next() == ["one"])
        async let two = batcher.read("two", fetch: script.fetch)
        #expect(await batches.next() == ["two"], "the second lane did not wait for the first")
        async let three = batcher.read("three", fetch: script.fetch)
        await Self.until { batcher.queuedCount == 1 }
        script.release()
        script.release()
        script.release()
        #expect(try await [one, two, three] == ["value of one", "value of two", "value of three"])
        #expect(batcher.counts == (3, 3))
    }

    @Test(.hangBound) func aReadIsAnsweredAtItsDeadlineWhetherSentOrQueuedBehindAStuckBatch() async throws {
        let watch = DeadlineWatch(tick: .milliseconds(5))
        let batcher = ReadBatcher<String, String>(
            lanes: 1, deadline: .init(duration: .milliseconds(30), watch: watch) { TestSupportError("too late") })
        let script = ScriptedFetch()
        var batches = script.started.makeAsyncIterator()
        let sent = Task { try await batcher.read("stuck", fetch: script.fetch) }
        #expect(await batches.next() == ["stuck"])
        let queued = Task { try await batcher.read("queued", fetch: script.fetch) }
        // The batch never answers; both reads are answered at their deadlines, not one deadline after another.
        await #expect(throws: TestSupportError.self) { try await sent.value }
        await #expect(throws: TestSupportError.self) { try await queued.value }
        #expect(batcher.queuedCount == 0, "the expired read left the queue unsent")
        #expect(batcher.waitingCount == 0)
        #expect(watch.count == 0)
        // The stuck batch answers at last: its answer finds nobody waiting, and the lane is free again.
        script.release()
        script.release()
        #expect(try await batcher.read("after", fetch: script.fetch) == "value of after")
        #expect(batcher.counts == (2, 2), "the expired read was never sent")
    }

    @Test(.hangBound) func aReadAnsweredInTimeTakesItsDeadlineOffTheWatch() async throws {
        let watch = DeadlineWatch(tick: .milliseconds(5))
        let batcher = ReadBatcher<String, String>(
            deadline: .init(duration: .seconds(600), watch: watch) { TestSupportError("too late") })
        let script = ScriptedFetch()
        script.release()
        script.release()
        async let one = batcher.read("one", fetch: script.fetch)
        async let two = batcher.read("two", fetch: script.fetch)
        #expect(try await [one, two] == ["value of one", "value of two"])
        #expect(watch.count == 0, "no deadline is left behind")
        #expect(batcher.waitingCount == 0)
    }
}
