import BrokerClient
import BrokerCore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// `broker link` and `broker unlink` end to end: a real broker, `broker emulate`'s Google, the CLI with
/// Tests/Interop/browser_flow.py as its browser, and what each step leaves in the audit trail.
@Suite("account linking through the CLI")
struct LinkingTests {
    static let password = "correct horse battery staple"
    /// Google's emulated account alice.
    static let alice = "google:104512345678901234567"

    /// A broker with Google (the emulator) and custom accounts, writing its audit trail to a file.
    static func broker(_ emulator: EmulatorProcess) async throws -> (BrokerProcess, String) {
        let directory = try BrokerProcess.temporaryDirectory()
        let audit = directory.appendingPathComponent("audit.log").path
        let config = #"{"server": {"audit_log": "\#(audit)"}, "# + emulator.googleOnlyConfig.drop { $0 != "\"" }
        return (try await BrokerProcess.start(config: config, directory: directory), audit)
    }

    static func link(_ client: ClientHome, account: String = "alice") async throws -> (CLI.Result, JSONValue?) {
        try await CLIBrowserLoginTests.login(client, browser: ["BROWSER_ACCOUNT": account], command: "link")
    }

    static func signIn(_ client: ClientHome, account: String = "alice") async throws -> (CLI.Result, JSONValue?) {
        try await CLIBrowserLoginTests.login(client, browser: ["BROWSER_ACCOUNT": account])
    }

    /// The audit events with `provider`, as `event outcome provider`.
    static func linkEvents(_ audit: String) throws -> [String] {
        try String(contentsOfFile: audit, encoding: .utf8).split(separator: "\n").compactMap { line in
            guard let event = JSONValue.parse(Array(line.utf8)), let name = event["event"]?.stringValue,
                name == "linked" || name == "unlinked"
            else { return nil }
            return [name, event["outcome"]?.stringValue ?? "", event["provider"]?.stringValue ?? ""].joined(
                separator: " ")
        }
    }

    @Test func googleLinkedToACustomAccountSignsInAsThatUserAndNoOneElse() async throws {
        let emulator = try await EmulatorProcess.start()
        let (server, audit) = try await Self.broker(emulator)
        defer { server.stop() }
        let ada = try ClientHome(server: server)
        try await ada.register("ada@example.com")
        let adaID = try #require(try ada.cached()).userID

        let (linked, page) = try await Self.link(ada)
        #expect(linked.status == 0, "\(linked.stderr)")
        #expect(
            linked.stderr.contains("Linked the Google account alice@example.com: it now signs in as \(adaID)"),
            "which account was linked is said: \(linked.stderr)")
        #expect(page?["page"]?.stringValue?.contains("Linked") == true)
        #expect(try ada.cached()?.userID == adaID, "the same user, a fresh session")

        let whoami = try await ada.run(["whoami"])
        #expect(whoami.status == 0)
        #expect(
            whoami.stdout.contains("signs in  custom (ada@example.com, not confirmed), google (alice@example.com)"),
            "\(whoami.stdout)")
        let listed = try #require(JSONValue.parse(Array(try await ada.run(["whoami", "--json"]).stdout.utf8)))
        let identities = try #require(listed["identities"]?.arrayValue)
        #expect(identities.map { $0["provider"]?.stringValue } == ["custom", "google"])
        #expect(identities.map { $0["primary"]?.boolValue } == [true, false])
        #expect(identities[1]["subject"]?.stringValue == "104512345678901234567")

        // Alice's Google account now signs in as Ada's user id, from any machine.
        let laptop = try ClientHome(server: server)
        let (signedIn, _) = try await Self.signIn(laptop)
        #expect(signedIn.status == 0, "\(signedIn.stderr)")
        #expect(try laptop.cached()?.userID == adaID)
        #expect(
            try await server.me(try #require(try laptop.cached()).accessToken.exposed, heldBy: laptop)["email"]
                == "ada@example.com")
        #expect(try await server.get("/auth/me").status == 401)

        // The same Google account cannot be attached to a second user.
        let bob = try ClientHome(server: server)
        try await bob.register("bob@example.com")
        let bobID = try #require(try bob.cached()).userID
        let (refused, refusedPage) = try await Self.link(bob)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("already signs in as another broker user"), "\(refused.stderr)")
        #expect(refusedPage?["page_status"]?.intValue == 400)
        #expect(try bob.cached()?.userID == bobID, "Bob's session is untouched")
        let (stillAda, _) = try await Self.signIn(try ClientHome(server: server))
        #expect(stillAda.stderr.contains("Signed in as \(adaID)"), "\(stillAda.stderr)")

        // Unlinking: the password may go while Google stays; then Google is the last way in.
        let noPassword = try await ada.run(["unlink", "--provider", "custom"])
        #expect(noPassword.status == 0 && noPassword.stderr.contains("Unlinked custom from \(adaID)"))
        let passwordGone = try await ada.run(
            ["login", "--provider", "custom", "--email", "ada@example.com", "--password-stdin"],
            stdin: Self.password + "\n")
        #expect(passwordGone.status == 1 && passwordGone.stderr.contains("wrong email or password"))
        let last = try await ada.run(["unlink", "--provider", "google"])
        #expect(last.status == 1 && last.stderr.contains("only way to sign in"), "\(last.stderr)")
        let notThere = try await ada.run(["unlink", "--provider", "custom"])
        #expect(notThere.status == 1 && notThere.stderr.contains("no email and password sign-in"), "\(notThere.stderr)")
        let unknown = try await ada.run(["unlink", "--provider", "myspace"])
        #expect(unknown.status == 64)
        #expect(try await server.me(try #require(try ada.cached()).accessToken.exposed, heldBy: ada).status == 200)

        #expect(
            try Self.linkEvents(audit) == [
                "linked success google", "linked failure google", "unlinked success custom",
                "unlinked failure google",
            ])
        let trail = try String(contentsOfFile: audit, encoding: .utf8)
        #expect(!trail.contains(Self.password) && !trail.contains("link_ticket"))
    }

    @Test func aGoogleUserAddsAPasswordCanDropGoogleAndLinkItBack() async throws {
        let emulator = try await EmulatorProcess.start()
        let (server, _) = try await Self.broker(emulator)
        defer { server.stop() }
        let gina = try ClientHome(server: server)
        #expect(try await Self.signIn(gina).0.status == 0)
        #expect(try gina.cached()?.userID.description == Self.alice)

        // Bad input first: a weak password, an address someone has; nothing changes.
        _ = try await ClientHome(server: server).register("taken@example.com")
        let weak = try await gina.run(
            ["link", "--provider", "custom", "--email", "gina@example.com", "--password-stdin"], stdin: "short\n")
        #expect(weak.status == 1 && weak.stderr.contains("at least"), "\(weak.stderr)")
        let taken = try await gina.run(
            ["link", "--provider", "custom", "--email", "taken@example.com", "--password-stdin"],
            stdin: Self.password + "\n")
        #expect(taken.status == 1 && taken.stderr.contains("already signs in as another user"), "\(taken.stderr)")
        let before = try await gina.run(["whoami", "--json"])
        #expect(JSONValue.parse(Array(before.stdout.utf8))?["identities"]?.arrayValue?.count == 1)

        let added = try await gina.run(
            ["link", "--provider", "custom", "--email", "Gina@Example.com", "--password-stdin"],
            stdin: Self.password + "\n")
        #expect(added.status == 0 && added.stderr.contains("Linked gina@example.com"), "\(added.stderr)")
        let again = try await gina.run(
            ["link", "--provider", "custom", "--email", "other@example.com", "--password-stdin"],
            stdin: Self.password + "\n")
        #expect(again.status == 1 && again.stderr.contains("already signs in with an email and password"))
        let twice = try await Self.link(gina)
        #expect(twice.0.status == 1 && twice.0.stderr.contains("unlink it first"), "\(twice.0.stderr)")

        let desk = try ClientHome(server: server)
        let password = try await desk.run(
            ["login", "--provider", "custom", "--email", "gina@example.com", "--password-stdin"],
            stdin: Self.password + "\n")
        #expect(password.status == 0, "\(password.stderr)")
        #expect(try desk.cached()?.userID.description == Self.alice)

        // Google, the identity the user id was made from, may go: the id stays, and Google signs in as nobody
        // until it is linked back.
        // The sessions Google started end with it: Gina's first sign-in; the desk's (password) session stays.
        let ginaToken = try #require(try gina.cached()).accessToken.exposed
        #expect(try await server.me(ginaToken, heldBy: gina).status == 200)
        let dropped = try await desk.run(["unlink", "--provider", "google"])
        #expect(dropped.status == 0, "\(dropped.stderr)")
        #expect(dropped.stderr.contains("Ended 1 session that signed in with google"), "\(dropped.stderr)")
        #expect(!dropped.stderr.contains("ended too"), "the desk's own session was started with the password")
        #expect(
            try await server.me(ginaToken, heldBy: gina).status == 401, "Gina's Google sign-in ended with the unlink")
        let ginaRefresh = try #require(try gina.cached()?.refreshToken).exposed
        let refreshed = try await server.post(
            "/auth/token",
            body: Array(FormEncoding.encode([("grant_type", "refresh_token"), ("refresh_token", ginaRefresh)]).utf8),
            contentType: "application/x-www-form-urlencoded")
        #expect(refreshed.status == 400 && refreshed.error == "invalid_grant", "and its refresh token with it")
        let (orphan, orphanPage) = try await Self.signIn(try ClientHome(server: server))
        #expect(orphan.status == 1 && orphan.stderr.contains("was unlinked from the user \(Self.alice)"))
        #expect(orphanPage?["page_status"]?.intValue == 400)
        let whoami = try await desk.run(["whoami"])
        #expect(whoami.stdout.contains("user      \(Self.alice)"))
        #expect(whoami.stdout.contains("signs in  custom (gina@example.com, not confirmed)"), "\(whoami.stdout)")

        #expect(try await Self.link(desk).0.status == 0)
        let back = try ClientHome(server: server)
        #expect(try await Self.signIn(back).0.status == 0)
        #expect(try back.cached()?.userID.description == Self.alice)

        // Unlinking Google again, from a session Google started: every such session ends, the asking one
        // included (the CLI forgets it) — here it and the desk's, which the link above replaced with its own.
        let deskToken = try #require(try desk.cached()).accessToken.exposed
        let selfEnding = try await back.run(["unlink", "--provider", "google"])
        #expect(selfEnding.status == 0, "\(selfEnding.stderr)")
        #expect(selfEnding.stderr.contains("Ended 2 sessions that signed in with google"), "\(selfEnding.stderr)")
        #expect(selfEnding.stderr.contains("so it has ended too"), "\(selfEnding.stderr)")
        #expect(try back.cached() == nil)
        #expect(try await server.me(deskToken, heldBy: desk).status == 401)

        // Deleting the user asks for the linked password and frees Google for a new user.
        let phone = try ClientHome(server: server)
        for home in [desk, phone] {
            let login = try await home.run(
                ["login", "--provider", "custom", "--email", "gina@example.com", "--password-stdin"],
                stdin: Self.password + "\n")
            #expect(login.status == 0, "\(login.stderr)")
        }
        let wrong = try await desk.run(["account", "delete", "--yes", "--password-stdin"], stdin: "not it\n")
        #expect(wrong.status == 1 && wrong.stderr.contains("wrong password"), "\(wrong.stderr)")
        let deleted = try await desk.run(["account", "delete", "--yes", "--password-stdin"], stdin: Self.password)
        #expect(deleted.status == 0, "\(deleted.stderr)")
        let token = try #require(try phone.cached()).accessToken.exposed
        #expect(try await server.me(token, heldBy: phone).status == 401, "every session of the user ended")
        let fresh = try ClientHome(server: server)
        #expect(try await Self.signIn(fresh).0.status == 0)
        #expect(try fresh.cached()?.userID.description == Self.alice, "a new user made from Google again")
        let whoamiFresh = try await fresh.run(["whoami", "--json"])
        #expect(JSONValue.parse(Array(whoamiFresh.stdout.utf8))?["identities"]?.arrayValue?.count == 1)
    }
}
