import ArgumentParser
import BrokerClient
import Glibc

@main
struct Broker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "broker",
        abstract: "An authentication broker: sign in through providers or custom accounts, carry short-lived tokens.",
        discussion: """
            Exit codes: 0 success, 1 failure, 4 authentication required, 64 usage error.
            Machine output goes to stdout; messages go to stderr.
            """,
        version: BrokerVersion.current,
        subcommands: [
            Register.self, Login.self, Token.self, Request.self, Exec.self, Credential.self, Whoami.self, Logout.self,
            Providers.self, Mint.self,
            Serve.self,
            Password.self, Account.self, Link.self, Unlink.self, Passkey.self, Mfa.self, Keys.self, Client.self,
            Resource.self,
            Users.self,
            Sessions.self,
            Audit.self, Database.self,
            Emulate.self,
        ]
    )

    /// The root every command returns to: a ``CommandFailure`` (or a client-layer error a command let through)
    /// is printed here, once, and picks the exit code; ArgumentParser's own errors, help and `ExitCode`s are
    /// ArgumentParser's to print (`exit(withError:)`).
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            guard let failure = CommandFailure.of(error) else { exit(withError: error) }
            Console.error(failure.message)
            if let hint = failure.hint { Console.hint(hint) }
            Glibc.exit(failure.status.rawValue)
        }
    }
}

enum BrokerVersion {
    static let current = "0.1.0"
}
