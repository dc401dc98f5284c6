import ArgumentParser
import BrokerClient
import BrokerConfiguration
import BrokerCore
import BrokerProviderSchemas
import BrokerServer
import BrokerStore
import Glibc
import ProviderSupport

extension Broker {
    /// `broker audit list`: the audit events kept in the store (`server.audit_store`), as the JSON lines of the
    /// audit log.
    struct Audit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the audit events kept in the store (server.audit_store).",
            subcommands: [List.self]
        )

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Print audit events, oldest first, one JSON object per line.")

            @OptionGroup var store: ServerStoreOptions

            @Option(name: .long, help: "Only events of this user.")
            var user: String?

            @Option(
                name: .long,
                help: ArgumentHelp(
                    "Only events from this time on: seconds since 1970 or 2026-11-24T08:00:00Z.", valueName: "TIME"))
            var since: String?

            @Option(name: .long, help: "At most this many events, the newest (default 1000).")
            var limit: Int = 1000

            /// Seconds since 1970, or RFC 3339 UTC (`Z`) to the second.
            static func time(_ text: String) -> Int64? {
                if text.isASCIIDigits { return Int64(text) }
                let parts = text.utf8.split(whereSeparator: { "-T:Z".utf8.contains($0) })
                let numbers = parts.compactMap { Int32(Substring($0)) }
                guard text.utf8.count == 20, text.hasSuffix("Z"), parts.count == 6, numbers.count == 6 else {
                    return nil
                }
                var fields = tm()
                fields.tm_year = numbers[0] - 1900
                fields.tm_mon = numbers[1] - 1
                fields.tm_mday = numbers[2]
                fields.tm_hour = numbers[3]
                fields.tm_min = numbers[4]
                fields.tm_sec = numbers[5]
                return Int64(timegm(&fields))
            }

            func validate() throws {
                guard (1...1_000_000).contains(limit) else { throw ValidationError("--limit must be 1–1000000") }
                if let since, Self.time(since) == nil {
                    throw ValidationError("--since must be seconds since 1970 or a time like 2026-11-24T08:00:00Z")
                }
            }

            func run() async throws {
                let owner = try user.map(Users.userID)
                let (store, configuration) = try await Client.open(self.store)
                let events: [AuditEventRecord]
                do {
                    events = try await store.auditEvents(user: owner, since: since.flatMap(Self.time), limit: limit)
                } catch {
                    throw CommandFailure("cannot read the audit events: \(error)")
                }
                if events.isEmpty && !configuration.auditStore {
                    Console.note("server.audit_store is off: events go to server.audit_log only")
                }
                for event in events { Console.out(event.document) }
            }
        }
    }
}
