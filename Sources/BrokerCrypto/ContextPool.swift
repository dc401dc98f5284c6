internal import COpenSSL
import Synchronization

/// OpenSSL contexts made ready once and used again: an `EVP_PKEY_CTX` set up for signing costs about as much as
/// the signature in OpenSSL 3, and a copied HMAC context's allocations were ~4,300 instructions of each CI mint.
///
/// Each context is held by one operation at a time: ``take()`` hands it out of the pool, ``giveBack(_:)`` puts it
/// back. Up to ``capacity`` are kept; a context given back beyond that, and every kept one when the pool goes, is
/// freed with the pool's free function. Every operation gives back what it took on each path that returns (a
/// `defer` where it can throw), so a refused signature or a failed verification loses no context.
///
/// The keys that own pools (``AsymmetricKey``, ``HMACKey``) free their own OpenSSL objects in their `deinit`,
/// before their pools go: OpenSSL counts the references a context holds (`EVP_PKEY_CTX_new_from_pkey` takes
/// one on its key), so the key object itself is released by whichever goes last.
package struct ContextPool: ~Copyable, Sendable {
    /// How many contexts are kept at most: more than the threads that use one key at once.
    package static let capacity = 16

    private let kept = Mutex<[ContextHandle]>([])
    private let free: @Sendable (OpaquePointer) -> Void

    /// A pool whose contexts are freed with `free` (`EVP_PKEY_CTX_free`, `EVP_MD_CTX_free`, `EVP_MAC_CTX_free`).
    package init(free: @escaping @Sendable (OpaquePointer) -> Void) {
        self.free = free
    }

    deinit {
        for handle in kept.withLock({ $0 }) { free(handle.pointer) }
    }

    /// A kept context, now the caller's alone; `nil` when none is kept (the caller makes one).
    package func take() -> OpaquePointer? {
        kept.withLock { $0.popLast() }?.pointer
    }

    /// Keeps `context` for the next operation, or frees it when ``capacity`` are kept already.
    package func giveBack(_ context: OpaquePointer) {
        let isKept = kept.withLock { contexts -> Bool in
            guard contexts.count < Self.capacity else { return false }
            contexts.append(ContextHandle(pointer: context))
            return true
        }
        if !isKept { free(context) }
    }

    /// How many contexts are kept now (for tests).
    package var keptCount: Int { kept.withLock { $0.count } }
}

/// An OpenSSL context that one holder at a time uses: a ``ContextPool``'s caller between `take` and `giveBack`, or
/// whoever holds the lock it sits behind (``HMACKey``'s keyed context).
struct ContextHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}
