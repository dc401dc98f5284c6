package import BrokerCore
package import BrokerStore
package import BrokerSystem
import Glibc
package import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals

/// Who a request came from, for the audit trail: set once per request by the HTTP layer (a task-local, so
/// that the services record it without passing it through every call).
package struct RequestOrigin: Sendable {
    package var address: String?
    package var userAgent: String?
    package var requestID: String?

    package init(address: String? = nil, userAgent: String? = nil, requestID: String? = nil) {
        self.address = address
        self.userAgent = userAgent
        self.requestID = requestID
    }

    @TaskLocal package static var current: RequestOrigin?
}

/// The security events of a broker as JSON lines — registrations, sign-ins and their failures, refresh-token
/// reuse, logouts, key rotations, CI clients added and removed, mints refused — each with the time, the user
/// when known, and the request's origin (``RequestOrigin``). Never a password, token, code or secret: the
/// fields are the ones ``record(_:outcome:user:fields:)`` is given, and callers give ids and reason codes only.
///
/// Written to a file (`server.audit_log`: opened with `O_APPEND`, so each event is one `write` that lands
/// whole even beside other writers, and reopened on SIGHUP for log rotation) or to standard error.
package final class AuditTrail: Sendable {
    package enum Destination: Sendable, Equatable {
        case file(String)
        case standardError
        /// Nowhere (tests that do not look at it).
        case discard
    }

    private struct Sink {
        var descriptor: Int32
    }

    /// `server.audit_log`: `stderr`, or a file path (`~` expanded).
    package static func destination(_ setting: String) -> Destination {
        setting == "stderr" ? .standardError : .file(PosixFile.expandingTilde(setting))
    }

    /// Events handed to the store's writer and events it has written, with whoever waits for them (a class:
    /// the writer task holds it, not the trail).
    private final class Stored: Sendable {
        struct Counts {
            var enqueued = 0
            var written = 0
            /// Events the full queue turned away (the file or stderr still has them), and whether the operator
            /// has been told since the queue last took one.
            var dropped = 0
            var dropping = false
            var waiters: [(target: Int, continuation: CheckedContinuation<Void, Never>)] = []
        }
        let counts = Mutex(Counts())
    }

    let destination: Destination
    private let sink: Mutex<Sink>
    private let clock: any WallClock
    private let stored = Stored()
    private let toStore: AsyncStream<AuditEventRecord>.Continuation?
    private let folding: Mutex<AuditAggregator>

    /// Events waiting for the store at most: beyond it new ones are not stored (they are still written to the
    /// file or stderr, and the operator is told), so a database that stalls under a flood cannot take the
    /// broker's memory with it (attack review RT2-13).
    package static let defaultQueueLimit = 10_000

    /// - Parameters:
    ///   - store: also keep events in the database (`server.audit_store`), written in order by one task of its
    ///     own so that a slow database never holds up a request; refusals that name no user are folded per
    ///     source network (``AuditAggregator``).
    ///   - queueLimit: events waiting for the store at most (``defaultQueueLimit``).
    /// - Throws: when the file cannot be opened (a clear start-up error naming it).
    package convenience init(
        destination: Destination, clock: any WallClock, store: (any AuditStore)? = nil,
        queueLimit: Int = AuditTrail.defaultQueueLimit
    ) throws(PosixFile.Failure) {
        try self.init(
            destination: destination, clock: clock, store: store, queueLimit: queueLimit, folding: AuditAggregator())
    }

    init(
        destination: Destination, clock: any WallClock, store: (any AuditStore)?, queueLimit: Int,
        folding: AuditAggregator
    ) throws(PosixFile.Failure) {
        self.destination = destination
        self.clock = clock
        self.folding = Mutex(folding)
        sink = Mutex(Sink(descriptor: try Self.open(destination)))
        guard let store else {
            toStore = nil
            return
        }
        let (events, continuation) = AsyncStream.makeStream(
            of: AuditEventRecord.self, bufferingPolicy: .bufferingOldest(max(1, queueLimit)))
        toStore = continuation
        let stored = stored
        Task.detached {
            for await event in events {
                do {
                    try await store.appendAuditEvent(event)
                } catch {
                    let line = "broker: audit event \(event.event) not stored: \(error)\n"
                    _ = line.withCString { write(STDERR_FILENO, $0, strlen($0)) }
                }
                let ready = stored.counts.withLock { state in
                    state.written += 1
                    let written = state.written
                    let ready = state.waiters.filter { $0.target <= written }.map(\.continuation)
                    state.waiters.removeAll { $0.target <= written }
                    return ready
                }
                for waiter in ready { waiter.resume() }
            }
        }
    }

    /// Waits until every event recorded so far is in the store (the admin CLI, before it exits); folded
    /// refusals are summarised first, whether or not their window has ended.
    package func flush() async {
        guard toStore != nil else { return }
        for summary in folding.withLock({ $0.drain() }) { enqueue(Self.record(summary, clock: clock)) }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = stored.counts.withLock { state -> Bool in
                if state.written >= state.enqueued { return true }
                state.waiters.append((state.enqueued, continuation))
                return false
            }
            if done { continuation.resume() }
        }
    }

    deinit {
        toStore?.finish()
        let descriptor = sink.withLock { $0.descriptor }
        if case .file = destination, descriptor >= 0 { close(descriptor) }
    }

    private static func open(_ destination: Destination) throws(PosixFile.Failure) -> Int32 {
        switch destination {
        case .standardError: return STDERR_FILENO
        case .discard: return -1
        case .file(let path):
            let descriptor = Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else {
                throw PosixFile.Failure(path: path, reason: String(cString: strerror(errno)))
            }
            return descriptor
        }
    }

    /// Opens the file again (after `logrotate` moved it): events written before go to the old file, events
    /// after to the new one; none is lost, since the swap happens under the same lock as every write.
    package func reopen() throws(PosixFile.Failure) {
        guard case .file = destination else { return }
        let fresh = try Self.open(destination)
        let old = sink.withLock { sink in
            defer { sink.descriptor = fresh }
            return sink.descriptor
        }
        close(old)
    }

    /// Records `event` (`sign_in`, `registration`, …) with its `outcome` (`success`, `failure`), the `user`
    /// when known, and further `fields` (reason codes, provider and client names, session id prefixes).
    package func record(
        _ event: String, outcome: String = "success", user: UserID? = nil, fields: [String: String] = [:]
    ) {
        guard destination != .discard || toStore != nil else { return }
        var object: [String: JSONValue] = [
            "time": .string(Self.timestamp(clock.seconds())),
            "event": .string(event),
            "outcome": .string(outcome),
        ]
        if let user { object["user_id"] = .string(user.description) }
        if let origin = RequestOrigin.current {
            if let address = origin.address { object["client_address"] = .string(address) }
            if let agent = origin.userAgent { object["user_agent"] = .string(String(agent.prefix(256))) }
            if let id = origin.requestID { object["request_id"] = .string(id) }
        }
        for (name, value) in fields { object[name] = .string(String(value.prefix(256))) }
        var line = JSONValue.object(object).serializedBytes
        if toStore != nil {
            var keep = true
            // A refusal that names no user, from a known address: folded per source network (RT2-13).
            if outcome == "failure", user == nil, let address = RequestOrigin.current?.address {
                let now = clock.seconds()
                let (store, summaries) = folding.withLock {
                    $0.admit(event: event, network: SourceAddress.network(address), now: now)
                }
                for summary in summaries { enqueue(Self.record(summary, clock: clock)) }
                keep = store
            }
            if keep {
                enqueue(
                    AuditEventRecord(
                        time: clock.seconds(), event: event, userID: user?.description,
                        document: String(decoding: line, as: UTF8.self)))
            }
        }
        guard destination != .discard else { return }
        line.append(UInt8(ascii: "\n"))
        let failure = sink.withLock { sink -> Int32? in
            PosixFile.writeAll(line, to: sink.descriptor) ? nil : errno
        }
        if let failure, case .file(let path) = destination {
            // A full disk or a removed mount loses this line of the trail; the operator hears of it.
            let note = "broker: audit event \(event) not written to \(path): \(String(cString: strerror(failure)))\n"
            _ = note.withCString { write(STDERR_FILENO, $0, strlen($0)) }
        }
    }

    /// Stores the summaries of folding windows that have ended (the server's periodic maintenance).
    package func tick() {
        guard toStore != nil else { return }
        let now = clock.seconds()
        for summary in folding.withLock({ $0.due(now: now) }) { enqueue(Self.record(summary, clock: clock)) }
    }

    /// Hands `record` to the store's writer, unless its queue is full.
    private func enqueue(_ record: AuditEventRecord) {
        guard let toStore else { return }
        let firstDrop = stored.counts.withLock { state -> Bool in
            switch toStore.yield(record) {
            case .enqueued:
                state.enqueued += 1
                state.dropping = false
                return false
            case .dropped:
                state.dropped += 1
                defer { state.dropping = true }
                return !state.dropping
            case .terminated:
                return false
            @unknown default:
                return false
            }
        }
        if firstDrop {
            let note =
                "broker: the audit store is \(AuditTrail.defaultQueueLimit) or more events behind; events are not "
                + "stored until it catches up (the audit log still has them)\n"
            _ = note.withCString { write(STDERR_FILENO, $0, strlen($0)) }
        }
    }

    /// Events the store's full queue turned away so far.
    package var droppedFromStore: Int { stored.counts.withLock { $0.dropped } }

    /// The row that stands for `summary`'s folded events.
    static func record(_ summary: AuditAggregator.Summary, clock: any WallClock) -> AuditEventRecord {
        let document: JSONValue = [
            "time": .string(timestamp(clock.seconds())), "event": "audit_events_folded", "outcome": "failure",
            "folded_event": .string(summary.event), "client_network": .string(summary.network),
            "count": .string(String(summary.count)), "from": .string(timestamp(summary.from)),
            "until": .string(timestamp(summary.until)),
        ]
        return AuditEventRecord(
            time: clock.seconds(), event: "audit_events_folded", userID: nil, document: document.serialized())
    }

    /// RFC 3339 UTC, seconds.
    package static func timestamp(_ seconds: Int64) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }
}

/// Reopens the audit file on SIGHUP (after `logrotate` moved it), for as long as the broker runs.
package struct AuditReopenService: Service {
    let audit: AuditTrail
    let logger: Logger

    package init(audit: AuditTrail, logger: Logger) {
        self.audit = audit
        self.logger = logger
    }

    package func run() async throws {
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        await cancelWhenGracefulShutdown {
            for await _ in hangups {
                do {
                    try audit.reopen()
                    logger.info("audit log reopened")
                } catch {
                    logger.error("cannot reopen the audit log", metadata: ["error": "\(error)"])
                }
            }
        }
    }
}
