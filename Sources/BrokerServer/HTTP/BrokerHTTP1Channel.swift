import HummingbirdCore
package import Logging
package import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// The broker's HTTP/1.1 connections: Hummingbird's `HTTP1Channel` but for where the broker's own handlers sit.
///
/// Hummingbird puts additional handlers after the conversion from NIO's HTTP/1.1 parts to HTTP types, which
/// parses every request target as a URL (3% of a small request's CPU, more than the rest of a constant
/// document's answer). The broker's handlers — the connection guard, the constant documents — work on NIO's
/// parts, before that conversion, so a document's request is answered without it. The rest is Hummingbird's
/// setup as it is: the same decoder limits, no pipelining assistance (the async channel handles pipelining), the
/// connection-state handler, and Hummingbird's own request loop.
package struct BrokerHTTP1Channel: ServerChildChannel, HTTPChannelHandler {
    typealias Value = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>

    let responder: HTTPChannelHandler.Responder
    /// A new connection's own handlers, in order (made for each connection).
    let connectionHandlers: @Sendable () -> [any RemovableChannelHandler]

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            try Self.configure(channel.pipeline.syncOperations, connectionHandlers(), logger: logger)
            return try NIOAsyncChannel(
                wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
        }
    }

    /// A connection's pipeline: NIO's HTTP/1.1 decoder and encoder, `handlers`, the conversion to HTTP types,
    /// Hummingbird's connection state.
    package static func configure(
        _ pipeline: ChannelPipeline.SynchronousOperations, _ handlers: [any RemovableChannelHandler], logger: Logger
    ) throws {
        // Hummingbird's own limits (HTTP1Channel.Configuration.DecoderConfiguration's defaults).
        var limits = NIOHTTPDecoderLimitConfiguration()
        limits.maxHeaderFieldSize = 80 * 1024
        limits.maxHeaderListSize = 80 * 1024
        limits.maxHeaderFieldCount = 1000
        try pipeline.configureHTTPServerPipeline(
            withPipeliningAssistance: false, withErrorHandling: false, withOutboundHeaderValidation: false,
            withEncoderConfiguration: .init(), withDecoderLimitConfiguration: limits)
        try pipeline.addHandlers(handlers)
        try pipeline.addHandler(HTTP1ToHTTPServerCodec(secure: false))
        try pipeline.addHandler(HTTPConnectionStateHandler(idleTimeout: nil, logger: logger))
    }

    func handle(value asyncChannel: Value, logger: Logger) async {
        await handleHTTP(asyncChannel: asyncChannel, logger: logger)
    }
}
