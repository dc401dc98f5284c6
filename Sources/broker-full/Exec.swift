import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerProviderSchemas
import Glibc
import ProviderSupport

extension Broker {
    struct Exec: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run COMMAND in broker's place with a fresh token in BROKER_TOKEN and the broker in BROKER_URL.",
            discussion: """
                The command replaces broker (exec: same process id, so signals and the exit status are the
                command's own). The token is valid for at least --min-valid seconds when the command starts.
                Example: broker exec -- sh -c 'curl -H "Authorization: Bearer $BROKER_TOKEN" https://api.example.com/'
                """
        )

        @OptionGroup var client: ClientOptions

        @Option(name: .long, help: ArgumentHelp("The variable that gets the token.", valueName: "NAME"))
        var env = "BROKER_TOKEN"

        @Option(name: .long, help: ArgumentHelp("Seconds the token must still be valid.", valueName: "SECONDS"))
        var minValid: Int64 = 60

        @Option(
            name: .long,
            help: ArgumentHelp(
                "A token for this API alone (RFC 8707): its aud is URL, which the broker must have registered.",
                valueName: "URL"))
        var resource: String?

        @Argument(parsing: .postTerminator, help: "The command and its arguments, after --.")
        var command: [String] = []

        func validate() throws {
            guard !command.isEmpty else { throw ValidationError("give the command to run after --") }
            guard minValid >= 0 else { throw ValidationError("--min-valid must not be negative") }
            if let resource, !ClientSettings.isResourceIndicator(resource) {
                throw ValidationError("--resource \(resource): an https URL (http on this machine), no fragment")
            }
            let name = Array(env.utf8)
            let valid =
                !name.isEmpty && !(name[0] >= UInt8(ascii: "0") && name[0] <= UInt8(ascii: "9"))
                && name.allSatisfy { byte in
                    (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                        || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                        || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "_")
                }
            guard valid, env != "BROKER_URL" else {
                throw ValidationError("--env must be a variable name (letters, digits, _) other than BROKER_URL")
            }
        }

        func run() async throws {
            let settings = try client.settings()
            let session = try await Token.session(settings, minValid: minValid, resource: resource)
            setenv(env, session.accessToken.exposed, 1)
            setenv("BROKER_URL", settings.key.brokerURL, 1)
            var arguments = command.map { strdup($0) } + [nil]
            execvp(command[0], &arguments)
            // Only reached when the command could not be started.
            let reason = String(cString: strerror(errno))
            unsetenv(env)
            throw CommandFailure("cannot run \(command[0]): \(reason)")
        }
    }
}
