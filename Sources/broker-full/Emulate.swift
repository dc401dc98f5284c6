import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerEmulators
import BrokerServer
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
                Prints one line, "emulator listening on http://H:P", once it accepts connections. \
                Config/emulated.json points a broker at it (default port 8788). The emulators, each under its path:

                \(BrokerEmulators.all.map { "- " + $0.summary }.joined(separator: "\n"))

                Each sign-in page lists its test users and takes any typed name. A script approves without the \
                page by adding approve_as=USER to the provider's authorize URL, or for every sign-in with \
                --approve-as USER.
                """
        )

        @Option(name: .long, help: "Address to listen on (default 127.0.0.1).")
        var host = "127.0.0.1"

        @Option(name: .long, help: "Port to listen on; 0 picks a free one (default 8788).")
        var port = 8788

        @Option(
            name: .customLong("approve-as"),
            help: ArgumentHelp("Approve every sign-in at once as this test user (no page).", valueName: "USER"))
        var approveAs: String?

        func validate() throws {
            guard (0...65535).contains(port) else { throw ValidationError("--port must be 0–65535") }
            guard LoopbackHost.contains(host) else {
                throw ValidationError("--host must be a loopback address: the emulators have test accounts only")
            }
        }

        func run() async throws {
            LoggingSystem.bootstrap { label in
                var handler = VisibleLogHandler(StreamLogHandler.standardError(label: label))
                handler.logLevel = .warning
                return handler
            }
            do {
                try await EmulatorServer.run(
                    emulators: BrokerEmulators.all, host: host, port: port, approveAs: approveAs,
                    logger: Logger(label: "broker.emulate"),
                    clock: SystemClock()
                ) { host, port in
                    let shown = host.contains(":") ? "[\(host)]" : host
                    Console.out("emulator listening on http://\(shown):\(port)")
                }
            } catch {
                throw CommandFailure("emulator stopped: \(error)")
            }
        }
    }
}
