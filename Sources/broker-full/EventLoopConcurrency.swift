import Atomics
import Glibc
import NIOCore
import NIOPosix

/// Where `broker serve` runs Swift concurrency's jobs. By default NIO's own take-over; with
/// `BROKER_CONCURRENCY_EXECUTOR=event-loops`, on the same event loops (the threads Hummingbird serves on) but as jobs
/// of no isolation (the runtime's generic executor); with `dispatch`, on Swift's own pool. See ``Choice`` for why the
/// default is not the way with fewer instructions.
///
/// NIO's own take-over (`NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()`)
/// runs each job as if it were isolated to its event loop's serial executor. The runtime hands a thread over in an
/// executor switch only from the generic executor or a default actor, so under NIO's take-over every call into a
/// `nonisolated async` function (Hummingbird's responders and middlewares, NIO's async sequences and writers, ours)
/// put the task back in its loop's queue and waited for the loop's next turn. Under callgrind that was ~45 such
/// round trips for a request through the router and ~70 for a mint, each ~1,150 instructions to enqueue and more
/// to take out again. Run as jobs of the generic executor, those switches are plain calls.
///
/// The jobs go where NIO's take-over sends them: the current thread's loop when the task is already on one (an
/// await resumes on the connection's own thread), any loop of the group otherwise (a store's thread resuming a
/// task). That is the same as under NIO's take-over, and holds for the same reason: nothing of the broker blocks a
/// task's thread for long (password hashing, libcurl, SMTP and GRDB's calls run on threads of their own).
enum EventLoopConcurrency {
    /// `BROKER_CONCURRENCY_EXECUTOR`: unset (NIO's own take-over, the default), `event-loops` (as above) or
    /// `dispatch` (Swift's own pool). The default stays NIO's take-over: on the 2-core VM we measure on, running the
    /// jobs with no isolation made the crypto-heavy requests (`/auth/me`, the mint) 11–29% dearer in CPU per request
    /// under 16 connections, with fewer instructions, for a reason not found yet (BENCHMARKS.md, tenth session).
    enum Choice: String {
        case nio = ""
        case eventLoops = "event-loops"
        case dispatch
    }

    /// The runtime's `swift_task_enqueueGlobal` hook: `(job, the runtime's own enqueue) -> Void`, Swift's
    /// calling convention.
    private typealias Original = @convention(thin) (UnownedJob) -> Void
    private typealias Hook = @convention(thin) (UnownedJob, Original) -> Void

    /// The generic executor. The runtime spells it as a zero `SerialExecutorRef` and relies on that (the standard
    /// library's own `_getGenericSerialExecutor()` is the same bit pattern).
    private static let generic: UnownedSerialExecutor = {
        precondition(MemoryLayout<UnownedSerialExecutor>.size == 2 * MemoryLayout<UInt>.size)
        return unsafeBitCast((UInt(0), UInt(0)), to: UnownedSerialExecutor.self)
    }()

    /// Installs the hook, once, before the server starts; `false` if this runtime has no hook or another one is
    /// installed already. Jobs enqueued before keep running on Swift's pool until their next suspension.
    static func install() -> Bool {
        _ = generic
        guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "swift_task_enqueueGlobal_hook") else { return false }
        let hook: Hook = { job, _ in
            MultiThreadedEventLoopGroup.singleton.any().execute {
                job.runSynchronously(on: EventLoopConcurrency.generic)
            }
        }
        let slot = UnsafeAtomic<UnsafeRawPointer?>(
            at: symbol.assumingMemoryBound(to: UnsafeRawPointer?.AtomicRepresentation.self))
        return slot.compareExchange(
            expected: nil, desired: unsafeBitCast(hook, to: UnsafeRawPointer.self), ordering: .sequentiallyConsistent
        ).exchanged
    }

    /// Whether a new task's jobs now run on an event loop of the group (the check `broker serve` logs at start).
    static func jobsRunOnEventLoops() async -> Bool {
        await Task.detached { MultiThreadedEventLoopGroup.currentEventLoop != nil }.value
    }

    /// Applies `choice`; returns what a log line should say about it.
    static func apply(_ choice: Choice) async -> String {
        switch choice {
        case .dispatch:
            return "Swift's own thread pool (BROKER_CONCURRENCY_EXECUTOR=dispatch)"
        case .nio:
            guard NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor() else {
                return "Swift's own thread pool (NIO's take-over could not be installed)"
            }
            return "the event loops, isolated to them (NIO's take-over)"
        case .eventLoops:
            guard install() else { return "Swift's own thread pool (the runtime's enqueue hook is taken or missing)" }
            guard await jobsRunOnEventLoops() else {
                return "wherever the runtime's enqueue hook sends them: the hook is installed, "
                    + "but the probe task did not run on an event loop"
            }
            return "the event loops, as jobs of no isolation (BROKER_CONCURRENCY_EXECUTOR=event-loops)"
        }
    }
}
