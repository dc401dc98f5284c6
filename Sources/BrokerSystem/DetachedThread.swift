import Glibc

/// Runs blocking work on a new detached thread of its own.
///
/// For calls that hold their thread for a long time (`curl_easy_perform`, `poll` on a loopback listener, a
/// terminal read): Dispatch's pools and Swift's cooperative pool are sized to the core count (two threads on a
/// small CI machine), so a few such calls there would hold up everything else.
package enum DetachedThread {
    private final class Work {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    /// Starts `body` on a new thread with `stackSize` bytes of stack (the system's default when `nil`). If no
    /// thread can be had, runs it inline rather than lose it.
    package static func start(stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) {
        let work = Unmanaged.passRetained(Work(body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        if let stackSize { pthread_attr_setstacksize(&attributes, stackSize) }
        var thread = pthread_t()
        let created = pthread_create(
            &thread, &attributes,
            { argument in
                guard let argument else { return nil }
                let work = Unmanaged<Work>.fromOpaque(argument).takeRetainedValue()
                work.body()
                return nil
            }, work)
        if created != 0 {
            Unmanaged<Work>.fromOpaque(work).takeRetainedValue().body()
        }
    }
}
