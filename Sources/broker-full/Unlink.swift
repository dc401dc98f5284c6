import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerProviderSchemas
import ProviderSupport

extension Broker {
    struct Unlink: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Detach a way to sign in from the signed-in user (never the last one).",
            discussion: """
                The provider account no longer signs in as this user; custom removes the user's email and
                password. Sessions that were started with it end (this one too, if it was). The user id does not
                change. The last way to sign in cannot be unlinked: link another first, or delete the account.
                """
        )

        @OptionGroup var client: ClientOptions

        @Option(name: .long, help: "A way in the account has: google, github, custom, … (broker whoami lists them).")
        var provider: String

        func validate() throws {
            _ = try Login.wayInToChange(provider)
        }

        func run() async throws {
            let settings = try client.settings()
            let api = settings.api
            let chosen = try Login.wayInToChange(provider)
            try await Login.requireKnown(chosen, api: api)
            let (accountToken, session) = try await Broker.Token.accountToken(settings)
            let answer: JSONValue
            do {
                answer = try await api.unlink(accountToken, provider: chosen)
            } catch {
                if case .rejected(_, .lastIdentity, let description) = error { throw CommandFailure(description) }
                if case .rejected(404, _, let description) = error { throw CommandFailure(description) }
                if error.isAuthenticationRefusal {
                    throw ClientFailure.exit(.rejected(settings.key, reason: error.description), settings: settings)
                }
                throw ClientFailure.exit(error, doing: "unlinking")
            }
            Console.note("Unlinked \(chosen.rawValue) from \(session.userID).")
            // The broker ends every session that was started with the way in just removed.
            let ended = answer["sessions_ended"]?.intValue ?? 0
            if ended > 0 {
                Console.note("Ended \(ended) session\(ended == 1 ? "" : "s") that signed in with \(chosen.rawValue).")
            }
            if answer["this_session_ended"]?.boolValue == true {
                let service = SessionService(cache: settings.credentials(), api: api, key: settings.key)
                _ = try? await service.logout()
                Console.note(
                    "This session had signed in with \(chosen.rawValue), so it has ended too; sign in again "
                        + "another way (broker login --provider …).")
            }
        }
    }
}
