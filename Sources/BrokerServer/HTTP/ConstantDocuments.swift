import BrokerCore
import Glibc
import HTTPTypes
package import Logging
package import NIOCore
package import NIOHTTP1

/// The documents a `GET` answers the same way for every caller — the signing keys and the discovery document —
/// each named once, for the router and for ``ConstantDocumentHandler`` alike, so the two cannot drift apart.
package struct ConstantDocuments: Sendable {
    package struct Document: Sendable {
        /// The route, as the router has it: the label of the request metrics too.
        let path: String
        /// Worked out at each request (the key set changes when a key rotates).
        package let answer: @Sendable () -> APIResponse

        package init(path: String, answer: @escaping @Sendable () -> APIResponse) {
            self.path = path
            self.answer = answer
        }
    }

    package let documents: [Document]
    /// The request log's logger and metrics (``ErrorAndLogMiddleware``'s).
    let logger: Logger
    let metrics: BrokerMetrics?

    package init(documents: [Document], logger: Logger, metrics: BrokerMetrics?) {
        self.documents = documents
        self.logger = logger
        self.metrics = metrics
    }

    func document(_ path: String) -> Document? {
        for document in documents where document.path == path { return document }
        return nil
    }
}

/// Answers `GET` of a ``ConstantDocuments`` path on the connection's event loop, beneath the router (issue 35,
/// goal 1): such a request needs nothing of a task, the router or a middleware's `await`, and through them it
/// cost three times what the HTTP exchange itself does.
///
/// What the router's way gives every request, this gives too: the same status line, header fields (in the
/// same order: `Date` as Hummingbird writes it) and body; `X-Request-Id` taken or made; the request's log line
/// and its metrics (``RequestRecord``). It sits after ``ConnectionGuardHandler``, so the connection cap and the
/// request deadline see its requests, and tells the guard of each answer (``ConnectionGuardHandler/answered()``).
///
/// It handles inbound parts only, so the router's answers do not pass through it. The answer is written as
/// HTTP/1.1 bytes, whole, beneath NIO's response encoder: sent as three parts through the conversion from HTTP
/// types and the encoder, it cost more than everything else this handler does. Every value in it is the broker's
/// own (the documents, their headers, a request id of ``RequestID``'s safe characters, the date), so nothing a
/// client sends can add a line to it, and the test compares it byte for byte with the encoder's for the same
/// answer.
///
/// It works on NIO's HTTP/1.1 parts, before their conversion to HTTP types (``BrokerHTTP1Channel``), and passes
/// the router its requests as they came.
///
/// Anything it is not sure of goes the router's way, untouched:
/// - a method other than `GET`, a version other than HTTP/1.1, a target with a query or not exactly the
///   document's path, a `Connection` field other than one `keep-alive` (the router's way closes the connection
///   after a `close`);
/// - a request with a body or trailers (the head is held until its end shows there is none; if a body comes,
///   the head goes on ahead of it);
/// - any request while one that went the router's way is unanswered (the guard counts them:
///   ``ConnectionGuardHandler/awaitingAnswers``), so answers keep the requests' order when a client pipelines
///   them;
/// - everything, on a pipeline without NIO's response encoder (nothing to write beneath).
///
/// A server winding down closes idle connections through Hummingbird's connection-state handler, after this
/// one: between requests a connection is idle, since this handler answers a request as its end arrives.
package final class ConstantDocumentHandler: ChannelInboundHandler, RemovableChannelHandler {
    package typealias InboundIn = HTTPServerRequestPart
    package typealias InboundOut = HTTPServerRequestPart

    private let documents: ConstantDocuments
    private let connectionGuard: ConnectionGuardHandler
    /// Where answers are written: the context of NIO's response encoder (writes from it go beneath it).
    private var encoder: ChannelHandlerContext?
    /// A `GET` of a document whose end has not come yet: held back, to be answered here if it has no body.
    private var held: (head: HTTPRequestHead, document: ConstantDocuments.Document, started: ContinuousClock.Instant)?
    /// `Date`, as Hummingbird sends it on the router's answers: made once a second.
    private var date = (second: -1, text: "")

    init(documents: ConstantDocuments, connectionGuard: ConnectionGuardHandler) {
        self.documents = documents
        self.connectionGuard = connectionGuard
    }

    package func handlerAdded(context: ChannelHandlerContext) {
        encoder = try? context.pipeline.syncOperations.context(handlerType: HTTPResponseEncoder.self)
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        encoder = nil
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        switch part {
        case .head(let head):
            if !connectionGuard.awaitingAnswers, encoder != nil, let document = servable(head) {
                held = (head, document, .now)
                return
            }
            context.fireChannelRead(data)
        case .body:
            if let held {
                // A body after all: the router's way, head first.
                self.held = nil
                context.fireChannelRead(wrapInboundOut(.head(held.head)))
            }
            context.fireChannelRead(data)
        case .end(let trailers):
            if let held {
                self.held = nil
                if trailers == nil, let encoder {
                    answer(encoder: encoder, held.head, held.document, started: held.started)
                    return
                }
                context.fireChannelRead(wrapInboundOut(.head(held.head)))
            }
            context.fireChannelRead(data)
        }
    }

    package func channelInactive(context: ChannelHandlerContext) {
        held = nil
        context.fireChannelInactive()
    }

    /// The document `head` asks for, when this handler may answer it.
    private func servable(_ head: HTTPRequestHead) -> ConstantDocuments.Document? {
        guard head.method == .GET, head.version == .http1_1, let document = documents.document(head.uri) else {
            return nil
        }
        let connection = head.headers["Connection"]
        guard connection.isEmpty || (connection.count == 1 && ASCIIToken.equal(connection[0], "keep-alive")) else {
            return nil
        }
        return document
    }

    /// The request's `X-Request-Id`, read as the router's way reads it (HTTP types join repeated fields).
    private static func requestID(_ head: HTTPRequestHead) -> String? {
        let values = head.headers["X-Request-Id"]
        return values.isEmpty ? nil : values.joined(separator: ", ")
    }

    private func answer(
        encoder: ChannelHandlerContext, _ request: HTTPRequestHead, _ document: ConstantDocuments.Document,
        started: ContinuousClock.Instant
    ) {
        let requestID = RequestID.accepting(Self.requestID(request)) ?? RequestID.make()
        let now = time(nil)
        if now != date.second { date = (now, HTTPDate.text(secondsSince1970: now)) }
        let api = document.answer()
        let answer = prepared(api, document)
        let bytes = Self.encoded(answer, requestID: requestID, date: date.text, allocator: encoder.channel.allocator)
        encoder.writeAndFlush(NIOAny(IOData.byteBuffer(bytes)), promise: nil)
        connectionGuard.answered()
        RequestRecord(
            requestID: requestID, method: "GET", path: document.path, route: document.path,
            status: api.status
        ).finish(logger: documents.logger, recorder: answer.recorder, elapsed: .now - started)
    }

    /// An answer's bytes but for the request id and the date, and its request metrics.
    package struct Prepared {
        let api: APIResponse
        /// The status line and the fields through `Content-Length`.
        let head: ByteBuffer
        let body: ByteBuffer
        let recorder: BrokerMetrics.RequestRecorder?

        /// Whether `other` is this answer: a document's serialized bytes are the same array until they change
        /// (when a key rotates), and arrays compare their storage first.
        func isAnswer(_ other: APIResponse) -> Bool {
            guard let serialized = api.serialized, let theirs = other.serialized, serialized == theirs,
                api.status == other.status, api.html == other.html, api.headers.count == other.headers.count
            else { return false }
            return zip(api.headers, other.headers).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        }
    }

    /// The connection's prepared answer for `document`, made again when the answer changes.
    private var preparedAnswers: [String: Prepared] = [:]

    private func prepared(_ api: APIResponse, _ document: ConstantDocuments.Document) -> Prepared {
        if let known = preparedAnswers[document.path], known.isAnswer(api) { return known }
        let made = Self.prepare(
            api, recorder: documents.metrics?.requestRecorder(route: document.path, method: "GET", status: api.status))
        if api.serialized != nil { preparedAnswers[document.path] = made }
        return made
    }

    /// `api` as the router's way sends it (``BrokerHTTPServer/responseParts(_:)``, then Hummingbird's
    /// `Content-Length`): the status line and fields the way NIO's encoder writes them.
    package static func prepare(_ api: APIResponse, recorder: BrokerMetrics.RequestRecorder?) -> Prepared {
        let parts = BrokerHTTPServer.responseParts(api)
        var head = ByteBuffer()
        let status = HTTPResponseStatus(statusCode: api.status)
        head.writeString("HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\n")
        for header in parts.headers { field(header.name.rawName, header.value, into: &head) }
        if parts.headers[.contentLength] == nil {
            field("Content-Length", String(parts.body.readableBytes), into: &head)
        }
        return Prepared(api: api, head: head, body: parts.body, recorder: recorder)
    }

    /// The whole answer: `answer`, then the request id and the date after `Content-Length`, as Hummingbird and
    /// the request log add them.
    package static func encoded(_ answer: Prepared, requestID: String, date: String, allocator: ByteBufferAllocator)
        -> ByteBuffer
    {
        var buffer = allocator.buffer(
            capacity: answer.head.readableBytes + 64 + requestID.utf8.count + answer.body.readableBytes)
        buffer.writeImmutableBuffer(answer.head)
        field("X-Request-Id", requestID, into: &buffer)
        field("Date", date, into: &buffer)
        buffer.writeStaticString("\r\n")
        buffer.writeImmutableBuffer(answer.body)
        return buffer
    }

    private static func field(_ name: String, _ value: String, into buffer: inout ByteBuffer) {
        buffer.writeString(name)
        buffer.writeStaticString(": ")
        buffer.writeString(value)
        buffer.writeStaticString("\r\n")
    }
}

/// Case-insensitive comparison of an ASCII header token with `token`, which is given in lower case.
enum ASCIIToken {
    /// Whether `value` is `token` (given in lowercase) without regard to ASCII case.
    ///
    /// Compared over the two strings' contiguous bytes: the same comparison through `zip` of their UTF-8 views ran
    /// the standard library's iterator unspecialized, ~170 instructions a byte (two `Content-Type` checks cost a
    /// mint 7,141 under callgrind).
    static func equal(_ value: some StringProtocol, _ token: String) -> Bool {
        let a = value.utf8
        let b = token.utf8
        guard a.count == b.count else { return false }
        let compared = a.withContiguousStorageIfAvailable { a in
            b.withContiguousStorageIfAvailable { b in equal(bytes: a, b) }
        }
        if let compared, let compared { return compared }
        return zip(a, b).allSatisfy { x, y in x.asciiLowercased == y }
    }

    /// `equal(_:_:)` over bytes: `value`, lowercased, is `token`.
    static func equal(bytes value: UnsafeBufferPointer<UInt8>, _ token: UnsafeBufferPointer<UInt8>) -> Bool {
        guard value.count == token.count else { return false }
        for index in value.indices where value[index].asciiLowercased != token[index] { return false }
        return true
    }
}

/// The `Date` field's format (RFC 9110 §5.6.7, IMF-fixdate): `Sun, 06 Nov 1994 08:49:37 GMT`.
package enum HTTPDate {
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    package static func text(secondsSince1970 seconds: Int) -> String {
        let time = UTCTime(epochSeconds: Int64(seconds))
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let clock = "\(two(time.hour)):\(two(time.minute)):\(two(time.second))"
        return "\(days[Int(time.weekday)]), \(two(time.day)) \(months[Int(time.month) - 1]) \(time.year) \(clock) GMT"
    }
}
