import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// `broker users …` and `broker sessions …` against the store of a running `broker serve`: what they show,
/// and that revoking and deleting take effect at the broker at once (`/auth/me`, the refresh grant).
@Suite("Administration: users and sessions")
struct AdminCommandTests {
    @Test(.hangBound)
    func listShowRevokeAndDeleteWhileTheBrokerServes() async throws {
        let directory = try BrokerProcess.temporaryDirectory()
        let auditPath = directory.appendingPathComponent("audit.log").path
        let server = try await BrokerProcess.start(
            config: #"{"server": {"audit_log": "\#(auditPath)"}}"#, directory: directory)
        defer { server.stop() }
        let broker = AuditTrailTests.Broker(
            server: server, config: directory.appendingPathComponent("broker.json").path)
        func register(_ email: String) async throws -> (user: String, access: String, refresh: String) {
            let reply = try await broker.post(
                "/auth/register", json: #"{"email":"\#(email)","password":"correct horse battery staple"}"#)
            return (
                try #require(reply.body?["user_id"]?.stringValue),
                try #require(reply.body?["access_token"]?.stringValue),
                try #require(reply.body?["refresh_token"]?.stringValue)
            )
        }
        func me(_ token: String) async throws -> Int {
            var request = HTTPClientRequest(
                url: server.url + "/auth/me", headers: [(name: "Authorization", value: "Bearer \(token)")])
            request.timeout = .seconds(120)
            return try await HTTPClient.shared.send(request).status
        }
        let ada = try await register("ada@example.com")
        let bob = try await register("bob@example.com")
        let second = try await broker.post(
            "/auth/login", json: #"{"email":"ada@example.com","password":"correct horse battery staple"}"#)
        let adaSecond = try #require(second.body?["access_token"]?.stringValue)

        let listed = try await broker.cli(["users", "list", "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let users = JSONValue.parse(Array(listed.stdout.utf8))?["users"]
        guard case .array(let entries)? = users else {
            Issue.record("users list --json: \(listed.stdout)")
            return
        }
        #expect(Set(entries.compactMap { $0["user_id"]?.stringValue }) == [ada.user, bob.user])
        #expect(Set(entries.compactMap { $0["email"]?.stringValue }) == ["ada@example.com", "bob@example.com"])
        let custom = try await broker.cli(["users", "list", "--provider", "google", "--json"])
        #expect(custom.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == #"{"users":[]}"#)

        let shown = try await broker.cli(["users", "show", ada.user])
        #expect(shown.status == 0)
        guard case .array(let adaSessions)? = JSONValue.parse(Array(shown.stdout.utf8))?["sessions"] else {
            Issue.record("users show: \(shown.stdout)")
            return
        }
        #expect(adaSessions.count == 2)
        let sessions = try await broker.cli(["sessions", "list", "--user", ada.user, "--json"])
        #expect(sessions.stdout.contains(ada.user) && !sessions.stdout.contains(bob.user))

        // Revoking every session of a user: both of Ada's tokens stop at once; Bob's still works.
        #expect(try await me(ada.access) == 200)
        let revoked = try await broker.cli(["sessions", "revoke", "--user", ada.user])
        #expect(revoked.status == 0)
        #expect(revoked.stderr.contains("revoked 2 live sessions"))
        #expect(try await me(ada.access) == 401)
        #expect(try await me(adaSecond) == 401)
        let refresh = try await broker.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", ada.refresh)])
        #expect(refresh.status == 400)
        #expect(try await me(bob.access) == 200)

        // Deleting a user: their token stops, their account is gone, the email can register again.
        let deleted = try await broker.cli(["users", "delete", bob.user])
        #expect(deleted.status == 0, "\(deleted.stderr)")
        #expect(try await me(bob.access) == 401)
        let bobRefresh = try await broker.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", bob.refresh)])
        #expect(bobRefresh.status == 400)
        #expect(try await broker.cli(["users", "show", bob.user]).status == 1)
        #expect(try await broker.cli(["users", "delete", bob.user]).status == 1)
        #expect(try await register("bob@example.com").user != bob.user)

        // Disabling: the token stops at once, sign-in is refused with 403 until the user is enabled again.
        let carol = try await register("carol@example.com")
        #expect(try await broker.cli(["users", "disable", carol.user]).status == 0)
        #expect(try await me(carol.access) == 401)
        let refusedLogin = try await broker.post(
            "/auth/login", json: #"{"email":"carol@example.com","password":"correct horse battery staple"}"#)
        #expect(refusedLogin.status == 403)
        #expect(refusedLogin.body?["error"]?.stringValue == "account_disabled")
        let carolRefresh = try await broker.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", carol.refresh)])
        #expect(carolRefresh.status == 400)
        let shownDisabled = try await broker.cli(["users", "show", carol.user])
        #expect(JSONValue.parse(Array(shownDisabled.stdout.utf8))?["disabled_at"]?.intValue != nil)
        #expect(try await broker.cli(["users", "enable", carol.user]).status == 0)
        let welcomeBack = try await broker.post(
            "/auth/login", json: #"{"email":"carol@example.com","password":"correct horse battery staple"}"#)
        #expect(welcomeBack.status == 200)
        #expect(try await broker.cli(["users", "disable", "custom:nobody"]).status == 1)

        // A session id from before ids stopped beginning with "-" is revoked after "--" (a new user's finding:
        // argument-parser took such an id for an option).
        let legacy = try SQLiteStore(path: server.dataDirectory + "/broker.sqlite3")
        let dashed = "-legacy0123456789abcde"
        let adaID = try #require(UserID(ada.user))
        let owner = try #require(try await legacy.user(id: adaID))
        try await legacy.createSession(
            SessionRecord(
                id: dashed, userID: owner.id, clientID: "broker-cli", scope: nil,
                createdAt: Int64(Date().timeIntervalSince1970), revokedAt: nil, signedInWith: .custom),
            firstToken: RefreshTokenRecord(
                hash: Digest.sha256(dashed), sessionID: dashed, createdAt: Int64(Date().timeIntervalSince1970),
                expiresAt: Int64(Date().timeIntervalSince1970) + 3600))
        let asOption = try await broker.cli(["sessions", "revoke", dashed])
        #expect(asOption.status == 64, "without --, it reads as an option: \(asOption.stderr)")
        let afterDashes = try await CLI.run(
            ["sessions", "revoke", "--config", broker.config, "--data-dir", server.dataDirectory, "--", dashed])
        #expect(afterDashes.status == 0, "\(afterDashes.stderr)")
        #expect(try await legacy.session(id: dashed)?.revokedAt != nil)

        // Bad input: a clear usage error, nothing changed.
        let bad = try await broker.cli(["users", "delete", "not-a-user-id"])
        #expect(bad.status == 64)
        #expect(bad.stderr.contains("is not a user id"))
        #expect(try await broker.cli(["sessions", "revoke"]).status == 64)
        #expect(try await broker.cli(["sessions", "revoke", "abc", "--user", ada.user]).status == 64)
        #expect(try await broker.cli(["users", "list", "--provider", "myspace"]).status == 64)

        let audit = try AuditTrailTests.lines(auditPath).compactMap { $0["event"]?.stringValue }
        #expect(audit.contains("sessions_revoked") && audit.contains("user_deleted"))
        #expect(audit.contains("user_disabled") && audit.contains("user_enabled"))
        #expect(audit.contains("sign_in") && audit.filter { $0 == "sign_in" }.count >= 2)
    }
}
