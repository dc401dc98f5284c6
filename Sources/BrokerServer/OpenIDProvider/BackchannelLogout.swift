import BrokerCore
import BrokerCrypto
package import BrokerHTTP
import BrokerStore
import Logging
import Synchronization

/// Back-channel logout 1.0 (issue "Logout everywhere…" item 2): when a browser session ends, every app that
/// signed in through it and registered a `backchannel_logout_uri` receives a signed `logout_token` by POST.
///
/// The store queues the deliveries in the transaction that ends the session (end-session, `broker sessions
/// revoke`, a disabled or deleted user, a password reset or change, an unlinked way in), so a broker that stops
/// before sending loses none and any broker of a shared store may send them. This sender claims what is due,
/// posts it, and takes it off the queue, or tries again with back-off until ``LogoutDelivery/retryFor`` has
/// passed.
package final class BackchannelLogout: ContextualService {
    package let context: ServiceContext
    let http: @Sendable () -> any HTTPTransport
    /// How the sender waits between passes when nothing wakes it (a real, cancellable sleep; tests record the
    /// waits instead).
    let pause: @Sendable (Duration) async -> Void

    /// The member of `events` that makes a JWT a logout token (§2.4).
    package static let event = "http://schemas.openid.net/event/backchannel-logout"
    /// A logout token's lifetime: long enough for a slow receiver's clock, short enough not to be worth keeping.
    static let lifetime: Int64 = 120
    /// The longest wait for an app's answer.
    static let timeout: Duration = .seconds(5)
    /// Deliveries claimed (and sent concurrently) per pass.
    static let batch = 32

    /// A kick not yet seen by a wait, or the wait it should end at once.
    private struct Wake {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let wake = Mutex(Wake())

    package init(
        context: ServiceContext, http: @escaping @Sendable () -> any HTTPTransport,
        pause: @escaping @Sendable (Duration) async -> Void = { try? await Task.sleep(for: $0) }
    ) {
        self.context = context
        self.pause = pause
        self.http = http
    }

    /// Tells the sender that deliveries were queued: a wait under way ends now, or the next one does not begin.
    package func kick() {
        let waiter = wake.withLock { wake in
            guard let waiter = wake.waiter else {
                wake.pending = true
                return CheckedContinuation<Void, Never>?.none
            }
            wake.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns when ``kick()`` is called (or was, since the last wait) or after `limit`, whichever comes first.
    /// Nothing runs meanwhile: the sender sleeps until one of the two happens, with no timer looking at a flag.
    /// One wait at a time (the sender's loop); the kick is a continuation resumed once, and the sleep is
    /// cancelled when the kick wins (an `AsyncStream` would not do: cancelling its waiting iterator terminates
    /// the stream, and every later wait would return at once — a busy loop on the store).
    package func waitForWork(upTo limit: Duration) async {
        let kicked = wake.withLock { wake in
            defer { wake.pending = false }
            return wake.pending
        }
        if kicked || Task.isCancelled { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.pause(limit) }
            group.addTask { await self.nextKick() }
            await group.next()
            group.cancelAll()
        }
    }

    /// Returns at the next kick, or when the task is cancelled.
    private func nextKick() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = wake.withLock { wake in
                    // A cancellation that came before the continuation was stored found nothing to resume.
                    if wake.pending || Task.isCancelled {
                        wake.pending = false
                        return true
                    }
                    wake.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiter = wake.withLock { wake in
                defer { wake.waiter = nil }
                return wake.waiter
            }
            waiter?.resume()
        }
    }

    /// The wait before attempt `n + 1` after `n` failed ones: 5 s, doubling, at most 10 minutes.
    package static func backoff(afterAttempts attempts: Int) -> Int64 {
        min(5 << min(max(attempts - 1, 0), 7), 600)
    }

    /// Sends every delivery due now (one batch at a time until none is due); returns how many were delivered.
    @discardableResult package func deliverDue() async -> Int {
        var delivered = 0
        while true {
            let claimed: [LogoutDelivery]
            do {
                claimed = try await store.claimLogoutDeliveries(now: tokens.now, limit: Self.batch)
            } catch {
                logger.warning("cannot read the back-channel logout queue", metadata: ["error": "\(error)"])
                return delivered
            }
            if claimed.isEmpty { return delivered }
            delivered += await withTaskGroup(of: Bool.self) { group in
                for delivery in claimed { group.addTask { await self.deliver(delivery) } }
                var count = 0
                for await ok in group where ok { count += 1 }
                return count
            }
            if claimed.count < Self.batch { return delivered }
        }
    }

    /// One attempt; whether the app took it.
    private func deliver(_ delivery: LogoutDelivery) async -> Bool {
        let fields = [
            "client_id": delivery.clientID, "browser_session": String(delivery.sid.prefix(8)),
            "attempt": "\(delivery.attempts + 1)",
        ]
        let failure: String
        do {
            let token = try await logoutToken(for: delivery)
            var request = HTTPClientRequest(
                method: "POST", url: delivery.uri,
                headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json")],
                body: Array(FormEncoding.encode([("logout_token", token)]).utf8))
            request.timeout = Self.timeout
            request.connectTimeout = Self.timeout
            request.maxResponseBytes = 64 * 1024
            let response = try await http().send(request)
            if (200..<300).contains(response.status) {
                try await store.finishLogoutDelivery(id: delivery.id)
                metrics.backchannelLogout(outcome: "delivered")
                audit.record("backchannel_logout", user: UserID(delivery.subject), fields: fields)
                return true
            }
            failure = "HTTP \(response.status)"
        } catch {
            failure = "\(error)"
        }
        let now = tokens.now
        let next = now + Self.backoff(afterAttempts: delivery.attempts + 1)
        do {
            if next >= delivery.giveUpAt {
                try await store.finishLogoutDelivery(id: delivery.id)
                metrics.backchannelLogout(outcome: "given_up")
                audit.record(
                    "backchannel_logout", outcome: "failure", user: UserID(delivery.subject),
                    fields: fields.merging(["error": failure, "given_up": "true"]) { $1 })
                logger.warning(
                    "back-channel logout given up",
                    metadata: ["client_id": "\(delivery.clientID)", "error": "\(failure)"])
            } else {
                try await store.retryLogoutDelivery(id: delivery.id, at: next)
                metrics.backchannelLogout(outcome: "retried")
                audit.record(
                    "backchannel_logout", outcome: "failure", user: UserID(delivery.subject),
                    fields: fields.merging(["error": failure, "retry_in": "\(next - now)"]) { $1 })
            }
        } catch {
            logger.warning("cannot update the back-channel logout queue", metadata: ["error": "\(error)"])
        }
        return false
    }

    /// The logout token (§2.4): `iss`, `aud`, `iat`, `exp`, `jti`, `events`, `sid`, `sub` — never a `nonce` —
    /// signed like the app's id tokens, `typ: logout+jwt`.
    func logoutToken(for delivery: LogoutDelivery) async throws -> String {
        let app = try await store.app(clientID: delivery.clientID)
        let algorithm = app?.idTokenAlgorithm ?? "RS256"
        guard let signer = tokens.keys.current.idTokenSigner(algorithm: algorithm) else {
            throw APIError.serverError
        }
        let now = tokens.now
        let claims: [String: JSONValue] = [
            "iss": .string(tokens.issuer), "aud": .string(delivery.clientID), "iat": .int(now),
            "exp": .int(now + Self.lifetime), "jti": .string(try SecureRandom.token(byteCount: 16)),
            "events": .object([Self.event: .object([:])]), "sid": .string(delivery.sid),
            // The sub the app knows the user by (its pairwise one, Core 8.1).
            "sub": .string(UserID(delivery.subject).map { tokens.subject(of: $0, for: app) } ?? delivery.subject),
        ]
        return try signer.sign(claims: claims, type: "logout+jwt")
    }
}
