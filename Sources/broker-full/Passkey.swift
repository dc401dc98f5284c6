import ArgumentParser
import BrokerClient
import BrokerCore
import Glibc

extension Broker {
    struct Passkey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add, list and remove the signed-in user's passkeys.",
            discussion: """
                A passkey signs you in without a password: broker login --provider passkey, an app's sign-in page,
                or the /device page on a phone. Adding one opens the broker's page in a browser (a one-time link;
                the session's token never goes into the URL), where the browser or your phone makes it.
                """,
            subcommands: [Add.self, List.self, Remove.self]
        )
    }
}

extension Broker.Passkey {
    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Open the broker's page to add a passkey for the signed-in user, and wait until it is added.")

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Only print the page's URL; do not open a browser.")
        var noBrowser = false

        @Option(name: .long, help: ArgumentHelp("How long to wait for the new passkey.", valueName: "SECONDS"))
        var timeout = 300

        func validate() throws {
            guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
        }

        func run() async throws {
            let settings = try client.settings()
            let api = settings.api
            let (accountToken, _) = try await Broker.Token.accountToken(settings)
            let before: Set<String>
            let url: String
            do {
                before = Set(Self.ids(try await api.passkeys(accountToken)))
                url = try await api.passkeyTicket(accountToken).url
            } catch {
                if case .rejected(_, .notFound, let description) = error { throw CommandFailure(description) }
                throw ClientFailure.exit(error, doing: "adding a passkey")
            }
            Console.note("Add the passkey on this page (the link works once, for ten minutes):")
            Console.note("  \(url)")
            if !noBrowser, BrowserOpener.likely {
                if let problem = BrowserOpener.open(url) { Console.warning("could not open a browser: \(problem)") }
            }
            // Waits for the passkey to appear (the page ends the ceremony at the broker), within the account
            // token's five minutes and --timeout.
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(min(timeout, 290))
            while clock.now < deadline {
                try await Task.sleep(for: .seconds(2))
                let listed: JSONValue
                do {
                    listed = try await api.passkeys(accountToken)
                } catch {
                    throw ClientFailure.exit(error, doing: "waiting for the passkey")
                }
                if let added = listed["passkeys"]?.arrayValue?.first(where: {
                    $0["id"]?.stringValue.map { !before.contains($0) } ?? false
                }) {
                    Console.note("Added the passkey “\(added["name"]?.stringValue ?? "")”.")
                    return
                }
            }
            throw CommandFailure("no passkey was added within \(min(timeout, 290)) seconds")
        }

        static func ids(_ listed: JSONValue) -> [String] {
            (listed["passkeys"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the signed-in user's passkeys.")

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Print JSON: {\"passkeys\": [{id, name, created_at, last_used_at, …}]}.")
        var json = false

        func run() async throws {
            let settings = try client.settings()
            let (accountToken, _) = try await Broker.Token.accountToken(settings)
            let listed: JSONValue
            do {
                listed = try await settings.api.passkeys(accountToken)
            } catch {
                throw ClientFailure.exit(error, doing: "listing the passkeys")
            }
            if json { return Console.out(listed.serialized()) }
            let passkeys = listed["passkeys"]?.arrayValue ?? []
            if passkeys.isEmpty { return Console.note("No passkeys. Add one with: broker passkey add") }
            for passkey in passkeys {
                let used = passkey["last_used_at"]?.intValue.map { "last used \(Self.date($0))" } ?? "never used"
                Console.out(
                    "\(passkey["id"]?.stringValue ?? "")\t\(passkey["name"]?.stringValue ?? "")\t"
                        + "created \(Self.date(passkey["created_at"]?.intValue ?? 0))\t\(used)")
            }
        }

        /// A time as `YYYY-MM-DD HH:MM UTC`.
        static func date(_ seconds: Int64) -> String {
            var time = time_t(seconds)
            var parts = tm()
            gmtime_r(&time, &parts)
            func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
            return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday)) "
                + "\(two(parts.tm_hour)):\(two(parts.tm_min)) UTC"
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove one of the signed-in user's passkeys.")

        @OptionGroup var client: ClientOptions

        @Argument(help: "The passkey's id, as broker passkey list shows it (after -- when it begins with -).")
        var id: String

        func run() async throws {
            let settings = try client.settings()
            let (accountToken, _) = try await Broker.Token.accountToken(settings)
            do {
                _ = try await settings.api.removePasskey(accountToken, id: id)
            } catch {
                if case .rejected(_, .notFound, let description) = error { throw CommandFailure(description) }
                if case .rejected(_, .lastIdentity, let description) = error { throw CommandFailure(description) }
                throw ClientFailure.exit(error, doing: "removing the passkey")
            }
            Console.note("Removed the passkey \(id); it no longer signs in.")
        }
    }
}
