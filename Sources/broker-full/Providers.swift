import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerProviderSchemas
import Glibc
import ProviderSupport

extension Broker {
    struct Providers: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the providers the broker has enabled.")

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Print the broker's JSON.")
        var json = false

        func run() async throws {
            let settings = try client.settings()
            let listed: (list: [ProviderInfo], document: JSONValue)
            do {
                listed = try await settings.api.providers()
            } catch {
                throw ClientFailure.exit(error, doing: "listing the providers")
            }
            if json {
                Console.out(listed.document.serialized())
                return
            }
            let width = (listed.list.map(\.id.count).max() ?? 0) + 2
            for provider in listed.list {
                let flow = provider.flow == "password" ? "email + password" : "browser"
                Console.out(
                    provider.id + String(repeating: " ", count: width - provider.id.count) + provider.name
                        + " (\(flow))"
                )
            }
        }
    }
}
