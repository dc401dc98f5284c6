import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// Passkeys as a person uses them, in headless Chromium with Selenium's virtual authenticator (CTAP2, internal,
/// resident key, user verification): `broker passkey add` opens the broker's page and the browser makes the
/// passkey; a fresh `BROKER_HOME` signs in with `broker login --provider passkey` (no password typed); an
/// app's `/auth/authorize` signs in with it; `broker passkey list` and `remove`. The broker runs at
/// `http://localhost:PORT` (browsers refuse an IP address as a relying-party id).
@Suite("passkeys in Chromium with a virtual authenticator", .hangBound)
struct PasskeyChromiumTests {
    /// The Chromium helper: a browser whose authenticator keeps its passkeys between pages.
    final class Browser: @unchecked Sendable {
        let script: ScriptServer
        let port: String

        init(shots: String) async throws {
            script = try await offThread {
                try ScriptServer(TestPaths.interop("passkey_chromium.py"), [shots], prefix: "ready ")
            }
            port = script.ready
        }

        /// `$BROWSER` for the CLI: hands the URL to this browser.
        var command: String { "python3 \(TestPaths.interop("open_url.py")) \(port)" }

        func get(_ path: String) async throws -> JSONValue {
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)")
            request.timeout = .seconds(240)
            let reply = try await HTTPClient.shared.send(request)
            return try #require(JSONValue.parse(reply.body), "\(reply.bodyText)")
        }

        func open(_ url: String) async throws -> JSONValue {
            try await get("/open?" + FormEncoding.encode([("url", url)]))
        }

        func quit() async {
            _ = try? await get("/quit")
            script.close()
        }
    }

    @Test func addAPasskeyWithTheCLIThenSignInWithItWithoutAPassword() async throws {
        let sink = try await SMTPSink.start()
        // The issuer names the port, so it is chosen before the broker binds it: held until the broker listens.
        let reserved = try reserveLoopbackPort()
        let started = (
            reserved.port,
            try await BrokerProcess.start(
                config: #"""
                    {"server": {"issuer": "http://localhost:\#(reserved.port)"}, "providers": {"custom": {"enabled": true}},
                     "mail": {"url": "\#(sink.url)", "from": "Broker <broker@example.com>"}}
                    """#,
                arguments: ["--port", "\(reserved.port)"])
        )
        reserved.release()
        let (port, server) = started
        let issuer = "http://localhost:\(port)"
        defer { server.stop() }
        #expect(!server.stderr.contains("passkeys are off"), "\(server.stderr)")
        let shots =
            ProcessInfo.processInfo.environment["BROKER_SCREENSHOTS"]
            ?? server.directory.appendingPathComponent("screenshots").path
        let browser = try await Browser(shots: shots)
        defer { browser.script.close() }
        let person = try ClientHome(url: issuer)
        try await person.register("pat@example.com")
        let environment = ["BROWSER": browser.command]

        // broker passkey add: the page opens in the browser, the passkey is made, the CLI sees it arrive.
        let added = try await person.run(["passkey", "add", "--timeout", "120"], environment: environment)
        #expect(added.status == 0, "\(added.stderr)")
        #expect(added.stderr.contains("Added the passkey “Chromium”"), "\(added.stderr)")
        #expect(!added.stderr.contains("access_token") && !added.stderr.contains("Bearer"))
        let credentials = try await browser.get("/credentials")
        let made = try #require(credentials.arrayValue?.first, "\(credentials)")
        #expect(credentials.arrayValue?.count == 1 && made["resident"] == true, "\(credentials)")
        #expect(made["rp_id"]?.stringValue == "localhost")
        let listed = try await person.run(["passkey", "list", "--json"])
        let passkey = try #require(JSONValue.parse(Array(listed.stdout.utf8))?["passkeys"]?.arrayValue?.first)
        #expect(passkey["name"] == "Chromium" && passkey["last_used_at"] == .null, "\(listed.stdout)")
        let id = try #require(passkey["id"]?.stringValue)

        // A fresh BROKER_HOME signs in with the passkey: nothing typed, no password.
        let terminal = try ClientHome(url: issuer)
        let login = try await terminal.run(
            ["login", "--provider", "passkey", "--timeout", "120"], environment: environment)
        #expect(login.status == 0, "\(login.stderr)")
        let me = try await terminal.run(["whoami", "--json"])
        let whoami = try #require(JSONValue.parse(Array(me.stdout.utf8)), "\(me.stdout)")
        let owner = try await person.run(["whoami", "--json"])
        #expect(whoami["user_id"] == JSONValue.parse(Array(owner.stdout.utf8))?["user_id"], "the same user")
        #expect(whoami["provider"] == "passkey", "\(me.stdout)")

        // An app's sign-in page: the passkey button signs in and the app gets its code.
        let callback = "http://127.0.0.1:\(try freeLoopbackPort())/cb"
        let app = try await CLI.run(
            [
                "client", "add", "notes", "--redirect-uri", callback, "--first-party", "--public",
                "--data-dir", server.dataDirectory,
            ])
        #expect(app.status == 0, "\(app.stderr)")
        let pkce = try PKCE.generate()
        let authorize =
            issuer + "/auth/authorize?"
            + FormEncoding.encode([
                ("response_type", "code"), ("client_id", "notes"), ("redirect_uri", callback), ("scope", "openid"),
                ("state", "st"), ("code_challenge", pkce.challenge), ("code_challenge_method", "S256"),
            ])
        let signedIn = try await browser.open(authorize)
        let landed = try #require(signedIn["url"]?.stringValue, "\(signedIn)")
        #expect(landed.hasPrefix(callback + "?") && landed.contains("code="), "\(signedIn)")
        // (Chromium's conditional UI offers the passkey in the email field's autofill; the virtual authenticator
        // consents at once, so the page signs in as soon as it loads.) The app's tokens name the way in.
        let code = try #require(
            URLComponents(string: landed)?.queryItems?.first { $0.name == "code" }?.value, "\(landed)")
        let tokens = try await server.form(
            "/auth/token",
            [
                ("grant_type", "authorization_code"), ("code", code), ("client_id", "notes"),
                ("redirect_uri", callback), ("code_verifier", pkce.verifier),
            ])
        #expect(tokens.status == 200, "\(tokens.response.bodyText)")
        let access = try #require(tokens["access_token"]?.stringValue)
        #expect(jwtParts(access).claims?["idp"] == "passkey")

        // The address is confirmed in the browser; then the password goes: the passkey is the way in, and the
        // last one cannot be removed.
        _ = try await sink.messages { $0.contains { $0["subject"] == "Confirm your email address" } }
        let verify = try #require(
            try sink.mailedToken(to: "pat@example.com", subject: "Confirm your email address", path: "/auth/verify"))
        let confirmed = try await browser.open(issuer + "/auth/verify?token=" + verify)
        #expect(confirmed["title"] == "Your address is confirmed", "\(confirmed)")
        let unlinked = try await terminal.run(["unlink", "--provider", "custom"])
        #expect(unlinked.status == 0, "\(unlinked.stderr)")
        // After --: a credential id is base64url, and one in 64 begins with "-" (which would read as an option).
        let last = try await terminal.run(["passkey", "remove", "--", id])
        #expect(last.status == 1 && last.stderr.contains("only way to sign in"), "\(last.stderr)")

        // The device is lost. broker password forgot mails a recovery link; the browser adds a new passkey.
        _ = try await browser.get("/forget")
        let forgot = try await terminal.run(["password", "forgot", "--email", "pat@example.com"])
        #expect(forgot.status == 0, "\(forgot.stderr)")
        let subject = "Add a new passkey to your account"
        _ = try await sink.messages { $0.contains { $0["subject"]?.stringValue == subject } }
        let recovery = try #require(
            try sink.mailedToken(to: "pat@example.com", subject: subject, path: "/auth/passkey/recover"))
        let recovered = try await browser.open(issuer + "/auth/passkey/recover?token=" + recovery)
        #expect(recovered["title"] == "Passkey added", "\(recovered)")
        #expect(recovered["text"]?.stringValue?.contains("Every session of this account was signed out") == true)
        #expect(try await browser.get("/credentials").arrayValue?.count == 1, "the new passkey")

        // A fresh terminal signs in with the new passkey and removes the lost one; removing it again says so.
        let again = try ClientHome(url: issuer)
        let relogin = try await again.run(
            ["login", "--provider", "passkey", "--timeout", "120"], environment: environment)
        #expect(relogin.status == 0, "\(relogin.stderr)")
        let removed = try await again.run(["passkey", "remove", "--", id])
        #expect(removed.status == 0, "\(removed.stderr)")
        let after = try await again.run(["passkey", "list", "--json"])
        let left = JSONValue.parse(Array(after.stdout.utf8))?["passkeys"]?.arrayValue ?? []
        #expect(left.count == 1 && left.first?["id"]?.stringValue != id, "\(after.stdout)")
        let gone = try await again.run(["passkey", "remove", "--", id])
        #expect(gone.status == 1 && gone.stderr.contains("no passkey"), "\(gone.stderr)")
        await browser.quit()
    }
}
