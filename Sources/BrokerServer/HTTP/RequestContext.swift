import Hummingbird
import NIOCore

/// The request context: Hummingbird's core storage plus the peer address (login throttling per address).
package struct BrokerRequestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?
    /// The client this request stands for: the peer, or with a trusted proxy the address it forwarded
    /// (``TrustedProxies/client(peer:forwardedFor:)``, set by ``ErrorAndLogMiddleware``).
    var clientAddress: String?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
        clientAddress = remoteAddress?.ipAddress
    }

    var maxUploadSize: Int { RequestInput.maxBodySize }

    /// This request's id (`X-Request-Id`), set by ``ErrorAndLogMiddleware``.
    var requestID = "-"
}
