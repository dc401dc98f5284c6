import Foundation
import Hummingbird
import NIOCore
import NIOPosix

// The floor under the broker's HTTP path (issue 35): Hummingbird with nothing of ours — one route answering a
// file's bytes, on the same event loops the broker uses (NIO's, also as Swift concurrency's executor), no
// middleware. Benchmarks/floor.sh measures it beside nginx and the broker's own constant document.
//   hummingbird-floor PORT FILE      (prints "listening" once it accepts connections)

NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
let arguments = CommandLine.arguments
guard arguments.count == 3, let port = Int(arguments[1]),
    let file = FileManager.default.contents(atPath: arguments[2])
else {
    print("usage: hummingbird-floor PORT FILE")
    exit(64)
}
let document = ByteBuffer(bytes: Array(file))
let router = Router()
router.get("/.well-known/jwks.json") { _, _ in
    Response(
        status: .ok, headers: [.contentType: "application/json", .cacheControl: "public, max-age=60"],
        body: ResponseBody(byteBuffer: document))
}
let app = Application(
    router: router, configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: port)),
    onServerRunning: { _ in
        // Unbuffered: the script waiting for this line reads a file.
        let line = Array("listening\n".utf8)
        _ = line.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
    })
try await app.runService()
