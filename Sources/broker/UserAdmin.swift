import ArgumentParser
import BrokerConfiguration
import BrokerCore
import BrokerProviders
import BrokerServer
import BrokerStore
import ProviderSupport

#if canImport(Glibc)
    import Glibc
#endif

/// `broker users …` and `broker sessions …`: what an operator looks at and ends, on the broker's store, while
/// brokers run (the store decides; a broker asks it on every `/auth/me`, refresh and sign-in).
extension Broker {
    struct Users: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List, show, disable, enable and delete users.",
            subcommands: [List.self, Show.self, Disable.self, Enable.self, Delete.self]
        )

        static func userID(_ text: String) throws -> UserID {
            guard let id = UserID(text) else {
                throw Console.fail("\(text) is not a user id (they look like google:1234…)", code: BrokerExit.usage)
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
                let known = BrokerProviders.all.map(\.id) + [.custom]
                let filter = try provider.map { name in
                    guard let id = ProviderID(rawValue: name), known.contains(id) else {
                        let names = known.map(\.rawValue).joined(separator: ", ")
                        throw Console.fail("--provider \(name) is not one of \(names)", code: BrokerExit.usage)
                    }
                    return id
                }
                let (store, _) = try await Client.open(self.store)
                let users: [UserStatus]
                do {
                    users = try await store.users(provider: filter)
                } catch {
                    throw Console.fail("cannot read the users: \(error)")
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
                    guard let user = try await store.userStatus(id: userID) else { throw Console.fail("no user \(id)") }
                    let sessions = try await store.sessions(user: userID)
                    guard case .object(var document) = Users.document(user) else { return }
                    document["sessions"] = .array(sessions.map(Sessions.document))
                    Console.out(JSONValue.object(document).serialized())
                } catch let error as ExitCode {
                    throw error
                } catch {
                    throw Console.fail("cannot read the user: \(error)")
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
                throw Console.fail("cannot \(disabled ? "disable" : "enable") the user: \(error)")
            }
            guard found else { throw Console.fail("no user \(id)") }
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
                    throw Console.fail("cannot delete the user: \(error)")
                }
                guard deleted else { throw Console.fail("no user \(id)") }
                await Client.audit(configuration, store: store, "user_deleted", user: userID, fields: ["via": "cli"])
                Console.note("deleted \(userID) with their sessions")
            }
        }
    }

    struct Sessions: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List and revoke sessions.",
            subcommands: [List.self, Revoke.self]
        )

        static func document(_ session: SessionRecord) -> JSONValue {
            var entry: [String: JSONValue] = [
                "session_id": .string(session.id), "user_id": .string(session.userID.description),
                "client_id": .string(session.clientID), "created_at": .int(session.createdAt),
                "revoked_at": session.revokedAt.map(JSONValue.int) ?? .null,
            ]
            if let scope = session.scope { entry["scope"] = .string(scope) }
            if let way = session.signedInWith { entry["signed_in_with"] = .string(way.rawValue) }
            entry["kind"] = "tokens"
            // Its refresh token needs a proof by the client's DPoP key (the key's thumbprint: which key).
            if let jkt = session.dpopJKT { entry["dpop_jkt"] = .string(jkt) }
            return .object(entry)
        }

        /// The broker's own sign-in in a browser (apps' single sign-on), listed beside the token sessions.
        static func document(_ session: BrowserSessionRecord) -> JSONValue {
            [
                "session_id": .string(session.id), "user_id": .string(session.userID.description), "kind": "browser",
                "signed_in_with": .string(session.signedInWith.rawValue), "created_at": .int(session.authTime),
                "expires_at": .int(session.expiresAt), "revoked_at": session.revokedAt.map(JSONValue.int) ?? .null,
            ]
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List sessions, newest first.")

            @OptionGroup var store: ServerStoreOptions

            @Option(name: .long, help: "Only this user's sessions.")
            var user: String?

            @Flag(name: .long, help: "Print {\"sessions\": [...]}.")
            var json = false

            func run() async throws {
                let filter = try user.map(Users.userID)
                let (store, _) = try await Client.open(self.store)
                let sessions: [SessionRecord]
                let browsers: [BrowserSessionRecord]
                do {
                    sessions = try await store.sessions(user: filter)
                    browsers = try await store.browserSessions(user: filter)
                } catch {
                    throw Console.fail("cannot read the sessions: \(error)")
                }
                if json {
                    let list = sessions.map(Sessions.document) + browsers.map(Sessions.document)
                    Console.out(JSONValue.object(["sessions": .array(list)]).serialized())
                    return
                }
                if sessions.isEmpty && browsers.isEmpty { Console.note("no sessions") }
                for browser in browsers {
                    let state = browser.revokedAt.map { "revoked=\($0)" } ?? "live until \(browser.expiresAt)"
                    Console.out(
                        "\(browser.id)\t\(browser.userID)\tbrowser (\(browser.signedInWith.rawValue))"
                            + "\tcreated=\(browser.authTime)\t\(state)")
                }
                for session in sessions {
                    let state = session.revokedAt.map { "revoked=\($0)" } ?? "live"
                    Console.out(
                        "\(session.id)\t\(session.userID)\t\(session.clientID)\tcreated=\(session.createdAt)\t\(state)")
                }
            }
        }

        struct Revoke: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Revoke one session, or every session of a user (--user); their tokens stop at once.")

            @OptionGroup var store: ServerStoreOptions

            @Argument(help: "The session id.")
            var session: String?

            @Option(name: .long, help: "Revoke every live session of this user instead.")
            var user: String?

            func validate() throws {
                guard (session == nil) != (user == nil) else {
                    throw ValidationError("give a session id or --user ID, not both")
                }
            }

            func run() async throws {
                let (store, configuration) = try await Client.open(self.store)
                let now = SystemClock().seconds()
                let audit = Client.auditTrail(configuration, store: store)
                do {
                    if let user {
                        let userID = try Users.userID(user)
                        let count = try await store.revokeSessions(user: userID, now: now)
                        audit?.record("sessions_revoked", user: userID, fields: ["count": "\(count)", "via": "cli"])
                        Console.note("revoked \(count) live session\(count == 1 ? "" : "s") of \(userID)")
                    } else if let session {
                        guard let record = try await store.session(id: session) else {
                            // A browser session (the broker's own sign-in for apps)?
                            guard
                                let browser = try await store.browserSessions(user: nil).first(where: {
                                    $0.id == session
                                })
                            else { throw Console.fail("no session \(session)") }
                            let revoked = try await store.revokeBrowserSession(id: session, now: now)
                            if revoked {
                                audit?.record(
                                    "session_revoked", user: browser.userID,
                                    fields: ["session": String(session.prefix(8)), "kind": "browser", "via": "cli"])
                            }
                            Console.note(revoked ? "revoked \(session)" : "\(session) was already revoked")
                            await audit?.flush()
                            return
                        }
                        let revoked = try await store.revokeSession(id: session, now: now)
                        if revoked {
                            audit?.record(
                                "session_revoked", user: record.userID,
                                fields: ["session": String(session.prefix(8)), "via": "cli"])
                        }
                        Console.note(revoked ? "revoked \(session)" : "\(session) was already revoked")
                    }
                    await audit?.flush()
                } catch let error as ExitCode {
                    throw error
                } catch {
                    throw Console.fail("cannot revoke: \(error)")
                }
            }
        }
    }
}

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
                    throw Console.fail("cannot read the audit events: \(error)")
                }
                if events.isEmpty && !configuration.auditStore {
                    Console.note("server.audit_store is off: events go to server.audit_log only")
                }
                for event in events { Console.out(event.document) }
            }
        }
    }
}
