import ArgumentParser
import BrokerCore
import BrokerServer
import BrokerStore

extension Broker {
    /// `broker resource add|list|remove`: the APIs broker issues audience-bound tokens for (RFC 8707), in the
    /// broker's store. Safe while `broker serve` runs: the server reads a resource from the store on each request
    /// that names one.
    struct Resource: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Manage the APIs broker issues tokens for (RFC 8707 resource indicators).",
            discussion: """
                A client that asks for a token with resource=URL gets one whose aud is URL, for a URL registered
                here; any other resource is invalid_target. The API checks that aud is its own URL.
                """,
            subcommands: [Add.self, List.self, Remove.self]
        )

        struct Add: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Register an API: tokens asked for with resource=URL carry it as their audience.")

            @OptionGroup var store: ServerStoreOptions

            @Argument(help: "The API's URL: https (http only on a loopback host), no fragment.")
            var url: String

            @Option(
                name: .long,
                help: ArgumentHelp(
                    "A scope a client may ask for together with this resource; repeatable.", valueName: "S"))
            var scope: [String] = []

            @Flag(
                name: .long,
                help: ArgumentHelp(
                    "The API takes plain bearer tokens only (a git server, a container registry): its tokens are "
                        + "never DPoP-bound and live at most 300 seconds."))
            var bearer = false

            @Flag(name: .long, help: "Print {\"resource\", \"scopes\", \"bearer\"}.")
            var json = false

            func validate() throws {
                if let problem = ResourceIndicators.problem(url) { throw ValidationError("\(url): \(problem)") }
                for item in scope where !ClientRules.validScope(item) {
                    throw ValidationError("--scope '\(item)' is not a scope token (no spaces, quotes or backslashes)")
                }
            }

            func run() async throws {
                let (store, configuration) = try await Client.open(self.store)
                var unique: [String] = []
                for item in scope where !unique.contains(item) { unique.append(item) }
                // An app's own tokens carry its client_id as aud: an app described at this URL would be given
                // tokens this API takes.
                if (try? await store.app(clientID: url)) != nil {
                    throw CommandFailure(
                        "\(url) is an app's client_id (broker client list): an API cannot be registered under it")
                }
                do {
                    try await store.createResource(
                        ResourceRecord(url: url, scopes: unique, createdAt: SystemClock().seconds(), bearer: bearer))
                } catch let error as StoreError where error.code == .conflict {
                    throw CommandFailure("a resource \(url) is registered already (broker resource list)")
                } catch {
                    throw CommandFailure("cannot register the resource: \(error)")
                }
                await Client.audit(
                    configuration, store: store, "resource_added",
                    fields: [
                        "resource": url, "scopes": unique.joined(separator: " "), "bearer": bearer ? "yes" : "no",
                        "via": "cli",
                    ])
                if json {
                    Console.out(
                        JSONValue.object([
                            "resource": .string(url), "scopes": .array(unique.map(JSONValue.string)),
                            "bearer": .bool(bearer),
                        ]).serialized())
                } else {
                    Console.note(
                        "registered \(url): tokens asked for with resource=\(url) carry aud \(url)"
                            + (bearer ? ", unbound, for at most 300 seconds" : ""))
                }
            }
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List the registered APIs.")

            @OptionGroup var store: ServerStoreOptions

            @Flag(name: .long, help: "Print {\"resources\": [...]}.")
            var json = false

            func run() async throws {
                let (store, _) = try await Client.open(self.store)
                let resources: [ResourceRecord]
                do {
                    resources = try await store.resources()
                } catch {
                    throw CommandFailure("cannot read the resources: \(error)")
                }
                if json {
                    let list: [JSONValue] = resources.map { resource in
                        [
                            "resource": .string(resource.url), "scopes": .array(resource.scopes.map(JSONValue.string)),
                            "created_at": .int(resource.createdAt), "bearer": .bool(resource.bearer),
                        ]
                    }
                    Console.out(JSONValue.object(["resources": .array(list)]).serialized())
                    return
                }
                if resources.isEmpty {
                    Console.note("no resources yet: broker resource add URL [--scope S]")
                    return
                }
                for resource in resources {
                    Console.out(
                        resource.url + "\tscopes="
                            + (resource.scopes.isEmpty ? "-" : resource.scopes.joined(separator: ","))
                            + (resource.bearer ? "\tbearer" : ""))
                }
            }
        }

        struct Remove: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Remove an API: no new token names it (tokens issued for it live out their minutes).")

            @OptionGroup var store: ServerStoreOptions

            @Argument(help: "The API's URL, as registered.")
            var url: String

            func run() async throws {
                let (store, configuration) = try await Client.open(self.store)
                let removed: Bool
                do {
                    removed = try await store.deleteResource(url: url)
                } catch {
                    throw CommandFailure("cannot remove the resource: \(error)")
                }
                guard removed else { throw CommandFailure("no resource \(url) (broker resource list)") }
                await Client.audit(
                    configuration, store: store, "resource_removed", fields: ["resource": url, "via": "cli"])
                Console.note("removed resource \(url)")
            }
        }
    }
}
