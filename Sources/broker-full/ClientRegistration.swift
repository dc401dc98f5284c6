import ArgumentParser
import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerServer
import BrokerStore

extension Broker.Client {
    /// `broker client registration-token [--expires-in S]`: an initial access token (RFC 7591 §3) for one app to
    /// register itself at `POST /auth/clients` when `server.client_registration` is `token`. Printed once on
    /// stdout; the store keeps its SHA-256.
    struct RegistrationToken: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "registration-token",
            abstract: "Print an initial access token: one app may register itself with it (RFC 7591).",
            discussion: """
                With server.client_registration set to "token", POST /auth/clients takes an app's metadata with
                Authorization: Bearer TOKEN. Each token registers one app, within --expires-in seconds.
                """
        )

        @OptionGroup var store: ServerStoreOptions

        @Option(
            name: .customLong("expires-in"),
            help: ArgumentHelp("Seconds the token may wait for its registration (60–2592000).", valueName: "S"))
        var expiresIn: Int64 = 86_400

        @Flag(name: .long, help: "Print {\"registration_token\", \"expires_at\"}.")
        var json = false

        func validate() throws {
            guard (60...2_592_000).contains(expiresIn) else {
                throw ValidationError("--expires-in must be between 60 and 2592000 seconds (30 days)")
            }
        }

        func run() async throws {
            let (store, configuration) = try await Broker.Client.open(self.store)
            let token = try SecureRandom.token(byteCount: 32)
            let now = SystemClock().seconds()
            do {
                try await store.createRegistrationToken(
                    hash: Digest.sha256(token), RegistrationTokenRecord(createdAt: now, expiresAt: now + expiresIn))
            } catch {
                throw CommandFailure("cannot store the registration token: \(error)")
            }
            await Broker.Client.audit(
                configuration, store: store, "registration_token_created",
                fields: ["expires_in": "\(expiresIn)", "via": "cli"])
            if json {
                Console.out(
                    JSONValue.object(["registration_token": .string(token), "expires_at": .int(now + expiresIn)])
                        .serialized())
            } else {
                Console.out(token)
            }
            if configuration.clientRegistration != .token {
                Console.warning(
                    "server.client_registration is \"\(configuration.clientRegistration.rawValue)\": the broker takes "
                        + "this token only when it is \"token\"")
            }
            Console.note("good for one registration until \(RFC3339.format(epochSeconds: now + expiresIn))")
        }
    }
}
