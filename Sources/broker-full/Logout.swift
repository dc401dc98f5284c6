import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerProviderSchemas
import Glibc
import ProviderSupport

extension Broker {
    struct Logout: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke the session at the broker (best effort) and delete it locally.",
            discussion: "--all signs out of every cached session, every profile and broker."
        )

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Every profile.")
        var all = false

        func run() async throws {
            let settings = try client.settings()
            var keys = [settings.key]
            if all {
                do {
                    keys = try settings.credentials().sessions().map(\.key)
                } catch {
                    throw ClientFailure.exit(.cache(error), settings: settings)
                }
                if keys.isEmpty { Console.note("No cached sessions.") }
            }
            for key in keys {
                let service = SessionService(cache: settings.credentials(), api: settings.api(for: key), key: key)
                do {
                    let (removed, problem) = try await service.logout()
                    // The session's DPoP key goes with it: the next sign-in makes a new one.
                    settings.dpopKeys.remove(key)
                    if let problem {
                        Console.warning("could not revoke at the broker (\(problem)); deleted locally anyway")
                    }
                    if let removed {
                        Console.note("Signed out \(removed.userID) (\(key)).")
                    } else if !all {
                        Console.note("Not signed in (\(key)).")
                    }
                } catch {
                    throw ClientFailure.exit(error, settings: settings)
                }
            }
        }
    }
}
