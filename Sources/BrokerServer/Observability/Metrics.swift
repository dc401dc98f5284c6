import BrokerCore
import BrokerStore
import BrokerSystem
import Glibc
package import Prometheus
import Synchronization

/// The broker's Prometheus metrics (`GET /metrics`), one registry per broker so that several brokers in one
/// process (the tests) keep their own counts.
///
/// Every label is bounded: route templates, provider ids, grant types and reason codes — never an email, a user
/// id, a path with ids or a token. The registry's own API is used rather than swift-metrics' global factory:
/// it carries the `# HELP` texts `promtool check metrics` asks for, and it needs no process-wide bootstrap.
package final class BrokerMetrics: StoreObserver {
    package let registry = PrometheusCollectorRegistry()
    // Every metric recorded on a request's path is made in the registry once per label set and kept here: a
    // registry look-up per use (descriptor, label list, the registry's lock) is work the request does not need
    // — the request metrics' look-up was 4% of a constant document's CPU, an event counter's 0.8% of a mint.
    /// The request metrics by route, method and status class (every request records one).
    private let requestMetrics = MadeOnce<RequestKey, (Counter, DurationHistogram)>()
    /// The store-call histograms by operation (every request makes store calls).
    private let storeHistograms = MadeOnce<String, DurationHistogram>()
    /// The event counters (sign-ins, refreshes, mints, …) by name and labels.
    private let eventCounters = MadeOnce<EventKey, Counter>()
    /// The password hashes' wait (one histogram, no labels).
    private let hashWait: DurationHistogram

    /// A counter's name and labels, hashed and compared as they are given (flattening the labels into one array
    /// first made two arrays per count).
    private struct EventKey: Hashable {
        let name: String
        let labels: [(String, String)]

        static func == (a: EventKey, b: EventKey) -> Bool {
            a.name == b.name && a.labels.elementsEqual(b.labels) { $0.0 == $1.0 && $0.1 == $1.1 }
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(name)
            hasher.combine(labels.count)
            for (label, value) in labels {
                hasher.combine(label)
                hasher.combine(value)
            }
        }
    }

    private struct RequestKey: Hashable {
        let route: String
        let method: String
        let statusClass: Int
    }

    static let latencyBuckets: [Duration] = [
        .milliseconds(1), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
        .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(5),
        .seconds(10),
    ]

    private let signingKeyAge: Gauge
    private let hashQueueDepth: Gauge

    package init() {
        registry.makeGauge(
            descriptor: Self.name("process_start_time_seconds", "Start time of the process since the epoch."),
            labels: []
        ).set(Self.processStartTime())
        signingKeyAge = registry.makeGauge(
            descriptor: Self.name("broker_signing_key_age_seconds", "Age of the current signing key."),
            labels: [])
        hashQueueDepth = registry.makeGauge(
            descriptor: Self.name("broker_password_hash_queue_depth", "Password hashes waiting for a hashing thread."),
            labels: [])
        hashWait = registry.makeDurationHistogram(
            descriptor: Self.name(
                "broker_password_hash_wait_seconds", "Time a password hash waited for a hashing thread."),
            labels: [], buckets: Self.latencyBuckets)
    }

    /// A metric by its whole exposed name (`broker_refresh_tokens_total`: what the README and a dashboard say,
    /// so that searching the code for it finds it), split for the registry into name and unit suffix
    /// (`_total`, `_seconds`, or none).
    private static func name(_ whole: String, _ help: String) -> MetricNameDescriptor {
        for unit in ["total", "seconds"] where whole.hasSuffix("_" + unit) {
            return MetricNameDescriptor(
                metricName: String(whole.dropLast(unit.count + 1)), unitName: unit, helpText: help)
        }
        return MetricNameDescriptor(metricName: whole, unitName: "", helpText: help)
    }

    // MARK: Events

    /// Runs `body` and records `success`, or the reason it failed (``reason(_:)``), with `record`.
    nonisolated(nonsending) func counting<T>(
        success: String, _ record: (String) -> Void, _ body: nonisolated(nonsending) () async throws -> T
    ) async throws -> T {
        do {
            let value = try await body()
            record(success)
            return value
        } catch {
            record(Self.reason(error))
            throw error
        }
    }

    /// A bounded label for a failure: the API error's code, `store_unavailable`, or `error`.
    static func reason(_ error: any Error) -> String {
        if let error = error as? APIError { return error.code.rawValue }
        if let error = error as? SignInRedirect { return error.reason }
        if let error = error as? ConcealedFailure { return error.reason }
        if let error = error as? StoreError, error.code == .unavailable { return "store_unavailable" }
        return "error"
    }

    /// Counts one event of the counter `whole` (its whole exposed name) with `labels`.
    private func count(_ whole: String, _ help: String, _ labels: [(String, String)] = []) {
        let key = EventKey(name: whole, labels: labels)
        eventCounters.get(key) { registry.makeCounter(descriptor: Self.name(whole, help), labels: labels) }.increment()
    }

    /// The metrics of answered HTTP requests with this route template (`/auth/:provider/start`, `unmatched`),
    /// method and status class: ``RequestRecord`` records each request there, and a handler that answers many
    /// (``ConstantDocumentHandler``) looks them up once.
    func requestRecorder(route: String, method: String, status: Int) -> RequestRecorder {
        let key = RequestKey(route: route, method: method, statusClass: min(max(status / 100, 1), 5))
        let (counter, histogram) = requestMetrics.get(key) {
            (
                registry.makeCounter(
                    descriptor: Self.name("broker_http_requests_total", "HTTP requests answered."),
                    labels: [("route", route), ("method", method), ("status", "\(key.statusClass)xx")]),
                registry.makeDurationHistogram(
                    descriptor: Self.name("broker_http_request_duration_seconds", "Time to answer a request."),
                    labels: [("route", route)], buckets: Self.latencyBuckets)
            )
        }
        return RequestRecorder(counter: counter, histogram: histogram)
    }

    package struct RequestRecorder: Sendable {
        fileprivate let counter: Counter
        fileprivate let histogram: DurationHistogram

        func record(_ duration: Duration) {
            counter.increment()
            histogram.record(duration)
        }
    }

    /// A finished sign-in: `provider` a provider id or `custom`; `outcome` `success` or a reason code.
    package func signIn(provider: String, outcome: String) {
        count(
            "broker_sign_ins_total", "Sign-ins by provider and outcome.",
            [("provider", provider), ("outcome", outcome)])
    }

    /// A registration attempt: `created` or a reason code.
    func registration(outcome: String) {
        count("broker_registrations_total", "Account registrations by outcome.", [("outcome", outcome)])
    }

    /// A refresh-token presentation: `rotated`, `reused` (the session is then revoked), `expired`, `revoked`,
    /// `unknown`.
    func refresh(outcome: String) {
        count("broker_refresh_tokens_total", "Refresh-token presentations by outcome.", [("outcome", outcome)])
    }

    /// An account deleted by its own user.
    func accountDeleted() {
        count("broker_accounts_deleted_total", "Accounts deleted by their users.")
    }

    /// A device-code poll (RFC 8628) by outcome: `pending`, `slow_down`, `approved`, `denied`, `expired`, …
    func devicePoll(outcome: String) {
        count("broker_device_polls_total", "Device-code polls by outcome.", [("outcome", outcome)])
    }

    /// An app's authorization request by outcome: `code`, or the error the app got at its redirect URI.
    func appAuthorization(outcome: String) {
        count("broker_app_authorizations_total", "Apps' authorization requests by outcome.", [("outcome", outcome)])
    }

    /// A client registration (RFC 7591) by outcome: `registered` or the error code.
    func clientRegistration(outcome: String) {
        count(
            "broker_client_registrations_total", "Apps' own registrations (RFC 7591) by outcome.",
            [("outcome", outcome)])
    }

    /// An app's token request by outcome (`issued` or the error code).
    func appToken(outcome: String) {
        count("broker_app_tokens_total", "Apps' code grants by outcome.", [("outcome", outcome)])
    }

    /// A `broker link` or `broker unlink` by provider and outcome (`linked`, `unlinked`, or a reason code).
    func link(provider: String, outcome: String) {
        count(
            "broker_identity_links_total", "Identity links and unlinks by provider and outcome.",
            [("provider", provider), ("outcome", outcome)])
    }

    /// A password replaced: `reset` (mailed link) or `change` (signed in).
    func passwordEvent(_ kind: String) {
        count("broker_password_changes_total", "Passwords replaced, by way.", [("way", kind)])
    }

    /// DPoP proofs at the issuing endpoints: `bound`, or the error a refused one got.
    func dpop(outcome: String) {
        count("broker_dpop_proofs_total", "DPoP proofs at the token endpoint, by outcome.", [("outcome", outcome)])
    }

    /// Back-channel logouts: `delivered`, `retried` (a failed attempt that will be tried again), `given_up`.
    func backchannelLogout(outcome: String) {
        count(
            "broker_backchannel_logouts_total", "Back-channel logout deliveries to apps, by outcome.",
            [("outcome", outcome)])
    }

    /// Passkey ceremonies: `event` is `registration`, `sign_in` or `removal`; `outcome` is `success` or why not.
    func passkey(event: String, outcome: String) {
        count(
            "broker_passkey_ceremonies_total", "Passkey registrations, sign-ins and removals, by outcome.",
            [("event", event), ("outcome", outcome)])
    }

    /// A message handed to the mail server (`sent`) or given up after its attempts (`failed`), by kind.
    func mail(kind: String, outcome: String) {
        count(
            "broker_mail_total", "Mail sent or given up, by kind and outcome.", [("kind", kind), ("outcome", outcome)])
    }

    /// A session ended: `logout` (revocation endpoint), `refresh_reuse`, `code_reuse`, `unlinked` (the way in it
    /// was started with was unlinked).
    func revocation(reason: String) {
        count("broker_session_revocations_total", "Sessions revoked, by reason.", [("reason", reason)])
    }

    /// A CI mint: `grant` `client_credentials` or `token_exchange`; `outcome` `issued` or the error code.
    func mint(grant: String, outcome: String) {
        count("broker_mints_total", "CI token mints by grant and outcome.", [("grant", grant), ("outcome", outcome)])
    }

    /// A request refused to slow someone down: `login_throttle` (the per-account and per-address back-off),
    /// or the limit that answered 429.
    func throttled(_ limit: String) {
        count("broker_throttled_total", "Requests refused by a throttle or rate limit.", [("limit", limit)])
    }

    /// A password hash's wait for a thread.
    func hashing(waited: Duration) {
        hashWait.record(waited)
    }

    /// One store call, by operation (the ``Store`` method), as each store reports it (``StoreObserver``).
    package func storeCall(_ operation: String, duration: Duration) {
        storeHistograms.get(operation) {
            registry.makeDurationHistogram(
                descriptor: Self.name("broker_store_call_duration_seconds", "Store call latency by operation."),
                labels: [("operation", operation)], buckets: Self.latencyBuckets)
        }.record(duration)
    }

    /// The text exposition, with the gauges that are read rather than counted brought up to date first.
    package func exposition(signingKeyCreatedAt: Int64?, hashQueueDepth depth: Int, now: Int64) -> [UInt8] {
        signingKeyAge.set(Double(signingKeyCreatedAt.map { max(0, now - $0) } ?? 0))
        hashQueueDepth.set(Double(depth))
        return registry.emitToBuffer()
    }

    /// The process's start, from `/proc/self/stat` (field 22, in clock ticks after boot) and the boot time.
    static func processStartTime() -> Double {
        // (The clock through BrokerCore: Glibc's `timespec` here is credited to NIO's CNIOLinux in some builds.)
        let fallback = SystemClock().now().rounded(.down)
        // /proc files have size 0 to stat(2); PosixFile.read reads them to their end.
        guard let statBytes = try? PosixFile.read(path: "/proc/self/stat", maxSize: 64 * 1024),
            let bootBytes = try? PosixFile.read(path: "/proc/stat", maxSize: 1024 * 1024)
        else { return fallback }
        let stat = String(decoding: statBytes, as: UTF8.self)
        let boot = String(decoding: bootBytes, as: UTF8.self)
        guard let close = stat.lastIndex(of: ")") else { return fallback }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // Field 22 overall is the 20th after the command name's closing parenthesis.
        guard fields.count > 19, let ticks = Double(fields[19]),
            let line = boot.split(separator: "\n").first(where: { $0.hasPrefix("btime ") }),
            let bootTime = Double(line.dropFirst(6))
        else { return fallback }
        return bootTime + ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

/// Metrics by key, each made on its first use and read under a lock afterwards. `make` runs under the lock,
/// so two first uses of one key make it once (the registry would hand both the same metric anyway, at the cost
/// of its own look-up); the registry's lock is only ever taken inside this one, never the other way round.
private final class MadeOnce<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private let made = Mutex<[Key: Value]>([:])

    func get(_ key: Key, make: () -> Value) -> Value {
        made.withLock { known in
            if let value = known[key] { return value }
            let value = make()
            known[key] = value
            return value
        }
    }
}
