import BrokerCore
import BrokerStore
import Testing

/// `--database` / `server.database`: the URL forms the contract names, and a clear error for each bad one.
@Suite("database URLs")
struct DatabaseURLTests {
    @Test func postgresURLsParseWithDecodedPartsAndNoPasswordShown() throws {
        guard
            case .postgres(let location) = try DatabaseLocation.parse(
                "postgresql://br%40ker:p%2Bss@db.example:6432/my%20db")
        else {
            Issue.record("not a PostgreSQL location")
            return
        }
        #expect(location.user == "br@ker" && location.passwordInURL == "p+ss", "+ stays +, %2B is +")
        #expect(location.host == "db.example" && location.port == 6432 && location.database == "my db")
        #expect(!location.description.contains("p+ss"))
        guard case .postgres(let local) = try DatabaseLocation.parse("postgres://broker@127.0.0.1/broker") else {
            Issue.record("not a PostgreSQL location")
            return
        }
        #expect(local.port == 5432 && local.tls == .disable, "loopback: no TLS unless asked")
        // A DNS name that starts with 127. is somewhere else: TLS, verified (it was plain text before).
        guard case .postgres(let named) = try DatabaseLocation.parse("postgres://broker@127.attacker.example/broker")
        else {
            Issue.record("not a PostgreSQL location")
            return
        }
        #expect(named.tls == .verifyFull)
    }

    /// The one rule for "this machine" (database URLs, mail, api_urls, broker URLs, provider endpoints).
    @Test(arguments: [
        ("localhost", true), ("LOCALHOST", true), ("127.0.0.1", true), ("127.1.2.3", true), ("127.255.255.255", true),
        ("::1", true), ("[::1]", true), ("127.0.0.256", false), ("127.0.0", false), ("127.0.0.1.5", false),
        ("127.attacker.example", false), ("127.0.0.1.nip.io", false), ("128.0.0.1", false), ("0127.0.0.1", false),
        ("localhost.example", false), ("[::2]", false), ("", false), ("127..0.1", false),
    ])
    func loopbackHostsAreThisMachineOnly(host: String, loopback: Bool) {
        #expect(LoopbackHost.contains(host) == loopback, "\(host)")
    }

    @Test(arguments: [
        ("postgres://broker@db.example/br%zzoker", "bad %-escape"),
        ("postgres://broker@db.example/br%ffoker", "not UTF-8"),
        ("postgres://broker@db.example:0/broker", "port must be 1–65535"),
        ("postgres://broker@db.example/broker?sslmode=allow", "sslmode must be disable, require or verify-full"),
        ("postgres://broker@db.example/broker?x=1", "unknown PostgreSQL URL parameter"),
        ("postgres://db.example/broker", "needs a user"),
        ("mysql://broker@db.example/broker", "must start with postgres://"),
    ])
    func badURLsSayWhatIsWrong(url: String, problem: String) {
        do {
            _ = try DatabaseLocation.parse(url)
            Issue.record("\(url) was accepted")
        } catch {
            #expect(error.description.contains(problem), "\(url): \(error.description)")
        }
    }
}
