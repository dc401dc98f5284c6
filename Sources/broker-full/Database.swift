import ArgumentParser
import BrokerClient
import BrokerConfiguration
import BrokerCore
import BrokerServer
import BrokerStore
import BrokerStores
import BrokerSystem

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension Broker {
    /// `broker db migrate|copy`: the store's schema, and moving a broker's whole state between stores.
    struct Database: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "db",
            abstract: "Migrate the broker's database, or copy it into another.",
            subcommands: [Migrate.self, Copy.self]
        )

        struct Migrate: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Apply pending schema migrations; prints the schema version.",
                discussion: """
                    broker serve applies pending migrations itself at start (under a database lock, so brokers
                    starting together migrate once); run this to migrate ahead of a rolling upgrade. A database
                    migrated by a newer broker is refused.
                    """
            )

            @OptionGroup var store: ServerStoreOptions

            func run() async throws {
                let configuration: ServerConfiguration
                do {
                    configuration = try store.loadConfiguration()
                    try configuration.validate(source: store.config ?? "command line")
                } catch {
                    throw CommandFailure("config: \(error)")
                }
                do {
                    let opened = try await StoreOpener.open(configuration, logger: StoreOpener.quietLogger)
                    let version = try await opened.schemaVersion()
                    await opened.close()
                    Console.note("the database is at schema version \(version) (this broker's newest)")
                    Console.out(String(version))
                } catch {
                    throw CommandFailure("cannot migrate: \(error)")
                }
            }
        }

        struct Copy: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Copy every record of one store into an empty one.",
                discussion: """
                    Users, accounts, sessions and their refresh tokens, pending sign-in codes and markers, CI
                    clients and the keys: signed-in users stay signed in and CI secrets keep working. The
                    target must be empty (it is migrated first); the copy is one transaction.
                    The keys stay sealed under the source's master key: run the target's brokers with it
                    (for a single SQLite broker it is keys/master.key in its data directory).
                      broker db copy --from sqlite:~/.local/share/broker/broker.sqlite3 \\
                        --to postgres://broker@db.internal/broker
                    """
            )

            @Option(name: .long, help: ArgumentHelp("The store to copy: sqlite:PATH or postgres://…", valueName: "URL"))
            var from: String

            @Option(
                name: .long,
                help: ArgumentHelp("The empty store to fill: postgres://… or sqlite:PATH", valueName: "URL"))
            var to: String

            @OptionGroup var store: ServerStoreOptions

            func run() async throws {
                var base: ServerConfiguration
                do {
                    base = try store.loadConfiguration()
                    for url in [from, to] { _ = try DatabaseLocation.parse(url) }
                } catch {
                    throw CommandFailure("config: \(error)", status: .usage)
                }
                var source = base
                source.database = from
                var target = base
                target.database = to
                if case .sqlite(let path) = try? DatabaseLocation.parse(from) {
                    // A single broker's keys (and keys from before they moved into the store) are beside its file.
                    let expanded = PosixFile.expandingTilde(path)
                    source.dataDirectory = String(expanded[..<(expanded.lastIndex(of: "/") ?? expanded.startIndex)])
                    if source.dataDirectory.isEmpty { source.dataDirectory = "." }
                }
                do {
                    let from = try await StoreOpener.open(source, logger: StoreOpener.quietLogger)
                    let to = try await StoreOpener.open(target, logger: StoreOpener.quietLogger)
                    var held: [String] = []
                    for table in Schema.tables {
                        let count = try await to.count(table)
                        if count > 0 { held.append("\(count) \(table.name)") }
                    }
                    guard held.isEmpty else {
                        throw StoreOpener.Failure(
                            description: "the target is not empty (\(held.joined(separator: ", "))); "
                                + "copy only into a new database")
                    }
                    if !from.isShared {
                        // Brings a single broker's keys into its store first (they may still be files).
                        let master = try await MasterKey.load(
                            configuration: source, environment: ProcessInfo.processInfo.environment, store: from)
                        let vault = KeyVault(store: from, master: master, legacyDataDirectory: source.dataDirectory)
                        let now = SystemClock().seconds()
                        _ = try await vault.ring(now: now)
                        for name in ["client-secrets", "flow-state"] { _ = try await vault.secretKey(name, now: now) }
                        Console.note("the keys are sealed under \(master.origin): give the target's brokers that key")
                    }
                    var tables: [(Schema.Table, [[StoreValue]])] = []
                    for table in Schema.tables { tables.append((table, try await from.exportRows(table))) }
                    try await to.importRows(tables)
                    for (table, rows) in tables { Console.out("\(table.name) \(rows.count)") }
                    await from.close()
                    await to.close()
                } catch {
                    throw CommandFailure("cannot copy: \(error)")
                }
            }
        }
    }
}
