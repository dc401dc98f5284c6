package import BrokerConfiguration
import Glibc
import HTTPTypes
import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// Limits that keep slow or idle clients from exhausting the broker's connections and descriptors.
///
/// A connection has `requestTimeout` to deliver each request in full — from the moment it opens, or from the
/// end of the previous response — whether or not bytes keep trickling in (a slow-loris client sending a
/// byte every few seconds is closed all the same). Above `maxConnections` open connections, a new one is
/// answered `503` with `Connection: close` as soon as its request head arrives (or closed after a short
/// grace if it never comes); the listener stops accepting altogether at ``acceptLimit`` so that descriptors
/// never run out (issue "Proof under fire", finding 1).
package struct ConnectionLimits: Sendable, Hashable {
    package var maxConnections: Int
    /// Seconds a connection may take to send one whole request (head and body), idle time included.
    package var requestTimeout: Int64
    /// Seconds an over-the-cap connection gets to send its request head before it is closed unanswered.
    package var overflowGrace: Int64 = 2
    /// Connections one source network (``SourceAddress/network(_:)``) may hold at once; `nil`: no share.
    /// Before it, one address could take every slot and lock everyone else out (attack review RT2-10).
    package var perAddress: Int?
    /// Peers exempt from the share: a proxy's one address carries everyone behind it.
    package var trustedProxies = TrustedProxies()

    package init(
        maxConnections: Int, requestTimeout: Int64, perAddress: Int? = nil,
        trustedProxies: TrustedProxies = TrustedProxies()
    ) {
        self.maxConnections = maxConnections
        self.requestTimeout = requestTimeout
        self.perAddress = perAddress
        self.trustedProxies = trustedProxies
    }

    /// Descriptors kept back from connections: the store, key files, outbound HTTP, logs.
    package static let reservedDescriptors = 128
    /// Connections accepted above the cap only to be told 503 and closed.
    package static let overflowConnections = 64

    /// Connections the metrics port serves at once (a scraper or two and a person with curl need a handful).
    package static let metricsMaxConnections = 16
    /// Where the metrics port stops accepting: its cap plus a few quick 503s. Taken off the process's
    /// descriptor budget before the main port's share is worked out.
    package static let metricsAcceptLimit = metricsMaxConnections + 8

    /// Where accepting stops: the cap plus room for quick 503s, and never closer than
    /// ``reservedDescriptors`` to the descriptor limit.
    package func acceptLimit(descriptorLimit: Int) -> Int {
        max(1, min(maxConnections + Self.overflowConnections, descriptorLimit - Self.reservedDescriptors))
    }

    /// The cap actually enforced: `maxConnections`, lowered to fit the descriptor limit.
    package func effectiveMaxConnections(descriptorLimit: Int) -> Int {
        max(1, min(maxConnections, acceptLimit(descriptorLimit: descriptorLimit)))
    }
}

/// The process's descriptor limit.
package enum DescriptorLimit {
    /// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the soft limit now in force.
    @discardableResult
    package static func raiseToHardLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return limit.rlim_cur >= rlim_t(Int32.max) ? Int(Int32.max) : Int(limit.rlim_cur)
    }
}

/// The count of open connections, in all and per source network, shared by every connection's
/// ``ConnectionGuardHandler``.
package final class ConnectionCounter: Sendable {
    private struct Counts {
        var open = 0
        var perNetwork: [String: Int] = [:]
    }
    private let counts = NIOLockedValueBox(Counts())
    let limit: Int
    let perNetworkLimit: Int?

    package init(limit: Int, perNetwork: Int? = nil) {
        self.limit = limit
        perNetworkLimit = perNetwork
    }

    /// What a new connection is told.
    enum Admission: Equatable {
        /// Counted, and served.
        case admitted
        /// Counted above the cap: answered 503 when its request head arrives, then closed.
        case overCap
        /// Above its network's share: not counted at all (RT2-10) — it holds no slot another address could
        /// have had — and, like one above the cap, answered 503 as soon as its request head arrives, or closed
        /// unanswered after the short grace: never held for `request_timeout`.
        case overShare
    }

    /// Counts a new connection (from `network`, when it has a share), unless it is above its network's share.
    func admit(network: String? = nil) -> Admission {
        counts.withLockedValue { counts in
            if let network, let perNetworkLimit, (counts.perNetwork[network] ?? 0) >= perNetworkLimit {
                return .overShare
            }
            counts.open += 1
            if let network { counts.perNetwork[network, default: 0] += 1 }
            return counts.open <= limit ? .admitted : .overCap
        }
    }

    func release(network: String? = nil) {
        counts.withLockedValue { counts in
            counts.open -= 1
            if let network, let held = counts.perNetwork[network] {
                counts.perNetwork[network] = held > 1 ? held - 1 : nil
            }
        }
    }

    /// Networks holding connections now (tests: the table empties as connections close).
    var networks: Int { counts.withLockedValue { $0.perNetwork.count } }
}

/// One connection's request deadline and its place under the connection cap.
///
/// Sits right after NIO's HTTP/1.1 decoding (``BrokerHTTP1Channel``), so it sees whole request heads and ends: the deadline runs whenever every
/// request received so far has been answered (the connection is waiting for the client), and stops while a
/// complete request is being handled, so a slow handler is never cut off by it.
///
/// The deadline moves with every request, but its timer does not: one timer per connection, which on firing
/// closes the connection if the deadline has passed, goes again for the deadline if it has moved on, or stops if a
/// request is being handled. (A timer cancelled and made again at each request cost 5% of a small request.)
final class ConnectionGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private let counter: ConnectionCounter
    private let limits: ConnectionLimits
    private let logger: Logger
    private var admitted = false
    private var counted = false
    /// The source network this connection is counted under; `nil` for a trusted proxy or no share.
    private var network: String?
    /// Requests whose end has arrived, less responses ended. Below zero for a moment when the router answers a
    /// request before its body has all arrived (a 413 for a declared length): its end then brings it back to zero,
    /// and the deadline keeps running. (Clamped at zero, as it was, that end left the connection waiting for an
    /// answer already sent, with no deadline, for as long as the client kept it open.)
    private var unanswered = 0
    /// When the connection is closed, and why; `nil` while a request is being handled.
    private var deadline: (at: NIODeadline, reason: String)?
    /// The one timer, and when it fires.
    private var timer: (task: Scheduled<Void>, at: NIODeadline)?
    private var context: ChannelHandlerContext?
    private var refusing = false

    init(counter: ConnectionCounter, limits: ConnectionLimits, logger: Logger) {
        self.counter = counter
        self.limits = limits
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        counted = true
        if limits.perAddress != nil, let peer = context.channel.remoteAddress?.ipAddress,
            !limits.trustedProxies.contains(peer)
        {
            network = SourceAddress.network(peer)
        }
        switch counter.admit(network: network) {
        case .admitted:
            admitted = true
            arm(seconds: limits.requestTimeout, reason: "request not received in time")
        case .overCap:
            arm(seconds: limits.overflowGrace, reason: "over the connection cap")
        case .overShare:
            counted = false
            arm(seconds: limits.overflowGrace, reason: "over its address's share")
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        finish()
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish()
        context.fireChannelInactive()
    }

    /// Stops the deadline and gives the connection's place under the cap back (once).
    private func finish() {
        deadline = nil
        timer?.task.cancel()
        timer = nil
        if counted {
            counted = false
            counter.release(network: network)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        guard admitted else {
            if case .head = part, !refusing { refuse(context: context) }
            return
        }
        if case .end = part {
            unanswered += 1
            if unanswered > 0 { deadline = nil }
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { answered() }
        context.write(data, promise: promise)
    }

    /// A response has ended: through this handler, or written beneath it by ``ConstantDocumentHandler``.
    func answered() {
        guard admitted else { return }
        unanswered -= 1
        if unanswered <= 0 { arm(seconds: limits.requestTimeout, reason: "request not received in time") }
    }

    /// Whether a request received in full is still waiting for its answer (``ConstantDocumentHandler`` answers
    /// only when none is, so answers keep the order of pipelined requests).
    var awaitingAnswers: Bool { unanswered > 0 }

    /// The quick answer above the cap: 503 with `Retry-After`, then close.
    private func refuse(context: ChannelHandlerContext) {
        refusing = true
        let body = ByteBuffer(
            string: #"{"error":"temporarily_unavailable","error_description":"too many connections; try again"}"#
                + "\n")
        let head = HTTPResponseHead(
            version: .http1_1, status: .serviceUnavailable,
            headers: [
                "Content-Type": "application/json", "Content-Length": "\(body.readableBytes)", "Connection": "close",
                "Retry-After": "1",
            ])
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        let done = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: done)
        let channel = context.channel
        done.futureResult.whenComplete { _ in channel.close(promise: nil) }
    }

    private func arm(seconds: Int64, reason: String) {
        guard let context else { return }
        let at = context.eventLoop.now + .seconds(seconds)
        deadline = (at, reason)
        // A timer that fires by then finds the deadline moved and goes again; a later one is replaced.
        if let timer, timer.at <= at { return }
        schedule(at: at, context: context)
    }

    private func schedule(at: NIODeadline, context: ChannelHandlerContext) {
        timer?.task.cancel()
        let task = context.eventLoop.assumeIsolatedUnsafeUnchecked().scheduleTask(deadline: at) { [self] in
            timer = nil
            guard let deadline, let context = self.context else { return }
            if context.eventLoop.now >= deadline.at {
                logger.debug("connection closed", metadata: ["reason": "\(deadline.reason)"])
                context.channel.close(promise: nil)
            } else {
                schedule(at: deadline.at, context: context)
            }
        }
        timer = (task, at)
    }
}
