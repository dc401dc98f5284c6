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
    /// `broker users …` and `broker sessions …`: what an operator looks at and ends, on the broker's store, while
    /// brokers run (the store decides; a broker asks it on every `/auth/me`, refresh and sign-in).
    struct Users: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List, show, disable, enable and delete users.",
            subcommands: [List.self, Show.self, Disable.self, Enable.self, Delete.self]
        )

        static func userID(_ text: String) throws -> UserID {
            guard let id = UserID(text) else {
                throw CommandFailure("\(text) is not a user id (they look like google:1234…)", status: .usage)
            }
            return id
        }

        static func document(_ status: UserStatus) -> JSONValue {
            let user = status.user
            var entry: [String: JSONValue] = [
                "user_id": .string(user.id.description), "provider": .string(user.id.provider.rawValue),
                "created_at": .int(user.createdAt), "disabled_at": status.disabledAt.map(JSONValue.int) ?? .null,
            ]
            if let email = user.email { entry["email"] = .string(email) }
            if let name = user.name { entry["name"] = .string(name) }
            return .object(entry)
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List users, oldest first.")

            @OptionGroup var store: ServerStoreOptions

            @Option(name: .long, help: "Only users of this provider (google, custom, …).")
            var provider: String?

            @Flag(name: .long, help: "Print {\"users\": [...]}.")
            var json = false

            func run() async throws {
                // The build's own providers, custom, and those the configuration gives a type — checked before
                // the store is opened.
                let typed = (try? self.store.loadConfiguration())?.providerTypes.keys.sorted() ?? []
                let known = BrokerProviderSchemas.all.filter { !$0.typed }.map(\.id) + [.custom] + typed
                let filter = try provider.map { name in
                    guard let id = ProviderID(rawValue: name), known.contains(id) else {
                        let names = known.map(\.rawValue).joined(separator: ", ")
                        throw CommandFailure("--provider \(name.prefix(64)) is not one of \(names)", status: .usage)
                    }
                    return id
                }
                let (store, _) = try await Client.open(self.store)
                let users: [UserStatus]
                do {
                    users = try await store.users(provider: filter)
                } catch {
                    throw CommandFailure("cannot read the users: \(error)")
                }
                if json {
                    Console.out(JSONValue.object(["users": .array(users.map(Users.document))]).serialized())
                    return
                }
                if users.isEmpty { Console.note("no users") }
                for status in users {
                    let user = status.user
                    let email = user.email.map { VisibleText.escape($0) } ?? "-"
                    let name = user.name.map { VisibleText.escape($0) } ?? "-"
                    let state = status.disabledAt.map { "disabled=\($0)" } ?? "enabled"
                    Console.out("\(user.id)\t\(email)\t\(name)\tcreated=\(user.createdAt)\t\(state)")
                }
            }
        }

        struct Show: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Show one user and their sessions (JSON).")

            @OptionGroup var store: ServerStoreOptions

            @Argument(help: "The user id.")
            var id: String

            func run() async throws {
                let userID = try Users.userID(id)
                let (store, _) = try await Client.open(self.store)
                do {
                    guard let user = try await store.userStatus(id: userID) else {
                        throw CommandFailure("no user \(id)")
                    }
                    let sessions = try await store.sessions(user: userID)
                    guard case .object(var document) = Users.document(user) else { return }
                    document["sessions"] = .array(sessions.map(Sessions.document))
                    Console.out(JSONValue.object(document).serialized())
                } catch let error as ExitCode {
                    throw error
                } catch {
                    throw CommandFailure("cannot read the user: \(error)")
                }
            }
        }

        struct Disable: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Disable a user: their sessions end at once and they cannot sign in until enabled.")

            @OptionGroup var store: ServerStoreOptions

            @Argument(help: "The user id.")
            var id: String

            func run() async throws { try await Users.setDisabled(id, true, store) }
        }

        struct Enable: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Let a disabled user sign in again.")

            @OptionGroup var store: ServerStoreOptions

            @Argument(help: "The user id.")
            var id: String

            func run() async throws { try await Users.setDisabled(id, false, store) }
        }

        static func setDisabled(_ id: String, _ disabled: Bool, _ options: ServerStoreOptions) async throws {
            let userID = try userID(id)
            let (store, configuration) = try await Client.open(options)
            let found: Bool
            do {
                found = try await store.setUserDisabled(id: userID, disabled: disabled, now: SystemClock().seconds())
            } catch {
                throw CommandFailure("cannot \(disabled ? "disable" : "enable") the user: \(error)")
            }
            guard found else { throw CommandFailure("no user \(id)") }
            await Client.audit(
                configuration, store: store, disabled ? "user_disabled" : "user_enabled", user: userID,
                fields: ["via": "cli"])
            Console.note(disabled ? "disabled \(userID); their sessions are revoked" : "enabled \(userID)")
        }

        struct Delete: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Delete a user and everything of theirs; their tokens stop working at once.")

            @OptionGroup var store: ServerStoreOptions

            @Argument(help: "The user id.")
            var id: String

            func run() async throws {
                let userID = try Users.userID(id)
                let (store, configuration) = try await Client.open(self.store)
                let deleted: Bool
                do {
                    deleted = try await store.deleteUser(id: userID, now: SystemClock().seconds())
                } catch {
                    throw CommandFailure("cannot delete the user: \(error)")
                }
                guard deleted else { throw CommandFailure("no user \(id)") }
                await Client.audit(configuration, store: store, "user_deleted", user: userID, fields: ["via": "cli"])
                Console.note("deleted \(userID) with their sessions")
            }
        }
    }
}
