import BrokerSystem
internal import CCurl
import Glibc
import Synchronization

/// The one HTTP client of the broker and its CLI, on libcurl.
///
/// libcurl easy handles are not thread-safe, so each exchange owns one handle exclusively from start to end:
/// it is taken from a small pool (where idle handles keep their connection cache, so keep-alive works), driven
/// by `curl_easy_perform` on a thread of its own, reset and returned. No handle is ever touched by two threads at
/// once, and the client itself holds nothing but the pool behind a mutex, so it is `Sendable`.
///
/// TLS verification is always on and cannot be switched off. Redirects are followed only when a request asks.
package final class HTTPClient: Sendable {
    /// A process-wide client.
    package static let shared = HTTPClient()

    private let pool = Mutex<[HandleBox]>([])
    private let maxPooledHandles: Int
    package let userAgent: String

    package init(maxPooledHandles: Int = 8, userAgent: String = "broker/1.0") {
        _ = HTTPClient.globalInit
        self.maxPooledHandles = maxPooledHandles
        self.userAgent = userAgent
    }

    /// `curl_global_init` must run once, before any other thread uses curl: a lazily initialised static is
    /// initialised exactly once and thread-safely by the Swift runtime.
    private static let globalInit: Void = {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT))
    }()

    /// Performs `request` and returns the final response (any status).
    ///
    /// - Throws: ``HTTPClientError`` for transport failures: bad URL, refused connection, timeout, TLS
    ///   failure, a body over ``HTTPClientRequest/maxResponseBytes``, or task cancellation.
    package func send(_ request: HTTPClientRequest) async throws -> HTTPClientResponse {
        let handle = try takeHandle()
        let transfer = Transfer(request: request)
        let result: Result<HTTPClientResponse, HTTPClientError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let userAgent = self.userAgent
                // curl_easy_perform blocks its thread for the whole exchange: a thread per transfer keeps slow
                // ones from holding up the others (and their timeouts). libcurl needs little stack; 512 KiB
                // leaves ample room for its resolver and TLS.
                DetachedThread.start(stackSize: 512 * 1024) {
                    continuation.resume(returning: transfer.perform(on: handle.pointer, userAgent: userAgent))
                }
            }
        } onCancel: {
            transfer.cancelled.store(true, ordering: .relaxed)
        }
        giveBack(handle)
        return try result.get()
    }

    private func takeHandle() throws -> HandleBox {
        if let pooled = pool.withLock({ $0.popLast() }) { return pooled }
        guard let pointer = curl_easy_init() else {
            throw HTTPClientError(kind: .transport, message: "curl_easy_init failed")
        }
        return HandleBox(pointer: pointer)
    }

    private func giveBack(_ handle: HandleBox) {
        curl_easy_reset(handle.pointer)
        let kept = pool.withLock { handles -> Bool in
            guard handles.count < maxPooledHandles else { return false }
            handles.append(handle)
            return true
        }
        if !kept { handle.close() }
    }
}

/// Owns one easy handle. Only one task holds a box at a time (pool ownership), hence `@unchecked Sendable`.
private final class HandleBox: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer
    private var closed = false

    init(pointer: UnsafeMutableRawPointer) { self.pointer = pointer }

    func close() {
        guard !closed else { return }
        closed = true
        curl_easy_cleanup(pointer)
    }

    deinit { close() }
}

extension HTTPClient: HTTPTransport {}
