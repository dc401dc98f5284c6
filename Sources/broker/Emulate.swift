import ArgumentParser
import Logging
import ProviderEmulators

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension Broker {
    struct Emulate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Serve protocol-faithful emulators of the sign-in providers, for offline runs and tests.",
            discussion: """
                Prints one line, "emulator listening on http://H:P", once it accepts connections.
                Google (OpenID Connect) lives under /google; Config/emulated.json points a broker at it
                (default port 8788). Test accounts: alice (verified email), bob (unverified email).
                """
        )

        @Option(name: .long, help: "Address to listen on (default 127.0.0.1).")
        var host = "127.0.0.1"

        @Option(name: .long, help: "Port to listen on; 0 picks a free one (default 8788).")
        var port = 8788

        func validate() throws {
            guard (0...65535).contains(port) else { throw ValidationError("--port must be 0–65535") }
            guard ["127.0.0.1", "::1", "localhost"].contains(host) else {
                throw ValidationError("--host must be a loopback address: the emulators have test accounts only")
            }
        }

        func run() async throws {
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = .warning
                return handler
            }
            do {
                try await EmulatorServer.run(
                    host: host, port: port, logger: Logger(label: "broker.emulate"),
                    clock: { Int64(Date().timeIntervalSince1970) }
                ) { host, port in
                    let shown = host.contains(":") ? "[\(host)]" : host
                    Console.out("emulator listening on http://\(shown):\(port)")
                }
            } catch {
                throw Console.fail("emulator stopped: \(error)")
            }
        }
    }
}
