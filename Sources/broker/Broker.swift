import ArgumentParser

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
            Password.self, Account.self, Link.self, Unlink.self, Passkey.self, Keys.self, Client.self, Users.self,
            Sessions.self,
            Audit.self, Database.self,
            Emulate.self,
        ]
    )
}

enum BrokerVersion {
    static let current = "0.1.0"
}
