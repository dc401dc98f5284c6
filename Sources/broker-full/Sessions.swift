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
                    throw CommandFailure("cannot read the sessions: \(error)")
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

            @Argument(help: "The session id (one from before ids stopped beginning with - goes after --).")
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
                            else { throw CommandFailure("no session \(session)") }
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
                    throw CommandFailure("cannot revoke: \(error)")
                }
            }
        }
    }
}
