import BrokerCore
// A test helper: rewrites the credential store as fast as it can, so that a test can kill it with
// SIGKILL at arbitrary moments and check that the file always parses (CLITests, crash safety).
//   broker-cache-writer DIRECTORY
import BrokerCredentials
import Glibc

let directory = CommandLine.arguments[1]
let cache = FileTokenCache(directory: directory)
// Each writer's files differ from every other writer's, so a test can tell that this one has written.
var round = Int64(getpid()) * 1_000_000
while true {
    round += 1
    do {
        let locked = try cache.locked()
        // Sessions of varying number and size, so that successive files differ in length.
        for profile in 0..<Int(1 + round % 5) {
            let key = SessionKey(brokerURL: "http://127.0.0.1:8787", profile: "p\(profile)")
            try locked.save(
                Session(
                    key: key,
                    userID: UserID(provider: .custom, subject: "00000000-0000-4000-8000-\(String(round % 1_000_000))"),
                    provider: .custom,
                    accessToken: Secret(String(repeating: "a", count: Int(round % 3000))),
                    expiresAt: round,
                    refreshToken: Secret("refresh-\(round)")
                )
            )
        }
        if round % 7 == 0 { try locked.remove(SessionKey(brokerURL: "http://127.0.0.1:8787", profile: "p0")) }
        locked.unlock()
    } catch {
        print("broker-cache-writer: \(error)")
        exit(1)
    }
}
