import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerSystem
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// A provider of `"type": "oidc"` against OpenID Providers broker did not write: Authlib's server
/// (Tests/Interop/authlib_provider.py) — with client_secret_basic and with private_key_jwt, the ID token checks
/// shown failing through the CLI, a rotated key picked up — and another broker (a broker federating a broker).
@Suite("a provider of type oidc against upstreams we did not write, and against another broker")
struct UpstreamProviderTests {
    /// Authlib's provider, for a broker's `upstream` provider on any loopback port.
    static func authlib(_ extra: [String]) async throws -> (ScriptServer, String) {
        let script = TestPaths.interop("authlib_provider.py")
        let server = try await offThread {
            try ScriptServer(
                script, ["authlib-client", "http://127.0.0.1:*/auth/upstream/callback"] + extra, prefix: "listening ")
        }
        return (server, server.ready)
    }

    static func config(issuer: String, _ client: String) -> String {
        #"{"providers": {"upstream": {"type": "oidc", "display_name": "Upstream", "issuer": "\#(issuer)", \#(client)}}}"#
    }

    @Test func authlibsProviderSignsInWithASecretAndEachBadIDTokenFails() async throws {
        let (provider, issuer) = try await Self.authlib(["--secret", "authlib-secret"])
        defer { provider.close() }
        let server = try await BrokerProcess.start(
            config: Self.config(issuer: issuer, #""client_id": "authlib-client", "client_secret": "authlib-secret""#))
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let (signedIn, page) = try await CLIBrowserLoginTests.login(
            server, client, provider: "upstream", browser: ["BROWSER_ACCOUNT": "ada"])
        #expect(signedIn.status == 0, "\(signedIn.stderr) \(String(describing: page))")
        #expect(try client.cached()?.userID.description == "upstream:authlib-ada-0001")
        let me = try await client.run(["whoami", "--json"])
        #expect(me.stdout.contains("ada@upstream.example"), "\(me.stdout) \(me.stderr)")

        // email_verified: false — the user is made, the address is not trusted.
        let eveHome = try ClientHome(server: server)
        let (eve, _) = try await CLIBrowserLoginTests.login(
            server, eveHome, provider: "upstream", browser: ["BROWSER_ACCOUNT": "eve"])
        #expect(eve.status == 0, "\(eve.stderr)")
        let eveMe = try await eveHome.run(["whoami", "--json"])
        #expect(!eveMe.stdout.contains("eve@upstream.example"), "an unverified address is not kept: \(eveMe.stdout)")

        // The provider rolls its key: the next sign-in, under a kid not seen before, succeeds (first: a
        // made-up kid's refetch a moment before would hold it back for the refetch interval).
        let rotated = try await HTTPClient.shared.send(
            HTTPClientRequest(method: "POST", url: issuer + "/rotate", body: []))
        #expect(rotated.status == 200)
        let after = try ClientHome(server: server)
        let (again, _) = try await CLIBrowserLoginTests.login(
            server, after, provider: "upstream", browser: ["BROWSER_ACCOUNT": "ada"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try after.cached()?.userID.description == "upstream:authlib-ada-0001")

        for (fault, reason) in [
            ("issuer", "unexpected issuer"), ("audience", "audience"), ("nonce", "nonce"), ("expired", "expired"),
            ("resigned", "signature"), ("unknown-kid", "kid"),
        ] {
            let home = try ClientHome(server: server)
            let (result, page) = try await CLIBrowserLoginTests.login(
                server, home, provider: "upstream", browser: ["BROWSER_ACCOUNT": "ada", "BROWSER_FAULT": fault])
            #expect(result.status == 1, "\(fault): \(result.stderr)")
            #expect(result.stderr.contains(reason), "\(fault): \(result.stderr)")
            #expect(page?["page_status"]?.intValue == 400, "\(fault)")
            #expect(try home.cached() == nil, "\(fault)")
        }

    }

    /// A broker whose provider of type oidc is another broker's app: the person signs in with a password on
    /// the upstream broker's own page; the downstream keys its user on the upstream's subject and takes only what
    /// the upstream vouches for. The app is the upstream's, registered with `broker client add`.
    @Test func aBrokerFederatesABroker() async throws {
        let upstream = try await BrokerProcess.start()
        defer { upstream.stop() }
        let registered = try await upstream.register("ada@example.com", "correct horse battery staple", name: "Ada")
        #expect(registered.status == 201, "\(String(describing: registered.json))")
        // The downstream's port is chosen first, so that its callback can be the app's redirect URI.
        var downstream: BrokerProcess?
        var secret = "", clientID = ""
        for _ in 0..<3 where downstream == nil {
            let (socket, port) = try loopbackSocket(backlog: 1)
            close(socket)
            let added = try await CLI.run([
                "client", "add", "downstream-\(port)", "--redirect-uri",
                "http://127.0.0.1:\(port)/auth/upstream/callback", "--first-party", "--json", "--data-dir",
                upstream.dataDirectory,
            ])
            #expect(added.status == 0, "\(added.stderr)")
            let credentials = try #require(JSONValue.parse(Array(added.stdout.utf8)))
            clientID = credentials["client_id"]?.stringValue ?? ""
            secret = credentials["client_secret"]?.stringValue ?? ""
            downstream = try? await BrokerProcess.start(
                config: Self.config(
                    issuer: upstream.url, #""client_id": "\#(clientID)", "client_secret": "\#(secret)""#),
                arguments: ["--port", "\(port)"])
        }
        let server = try #require(downstream, "a downstream broker on a free port")
        defer { server.stop() }

        let result = try await ProcessRunner.python(
            "federated_sign_in.py", [server.url, "upstream", "ada@example.com"],
            stdin: Array("correct horse battery staple".utf8))
        #expect(result.status == 0, "\(result.stderr)")
        let seen = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout)")
        #expect(seen["upstream_pages"] == ["sign-in"], "a first-party app of the upstream asks no consent")
        let session = try #require(seen["session"], "\(seen)")
        let upstreamUser = try #require(registered["user_id"]?.stringValue)
        #expect(session["user_id"]?.stringValue == "upstream:" + upstreamUser, "keyed on the upstream's subject")
        let me = try await server.me(try #require(session["access_token"]?.stringValue))
        #expect(me["name"]?.stringValue == "Ada", "\(String(describing: me.json))")
        // The upstream has no mail to confirm addresses with: it says email_verified false, and the downstream
        // does not take the address.
        #expect(me["email"] == nil, "\(String(describing: me.json))")

        // A wrong password at the upstream signs nobody in downstream.
        let wrong = try await ProcessRunner.python(
            "federated_sign_in.py", [server.url, "upstream", "ada@example.com"], stdin: Array("not the password".utf8))
        #expect(wrong.status != 0 || !wrong.stdout.contains("access_token"), "\(wrong.stdout)")
    }

    @Test func authlibsProviderTakesOurPrivateKeyJWT() async throws {
        let directory = try BrokerProcess.temporaryDirectory()
        let key = try AsymmetricKey.generate(.ecP256)
        let keyFile = directory.appendingPathComponent("client-key.pem").path
        try PosixFile.writeAtomically(Array(try key.privateKeyPEM().utf8), to: keyFile, mode: 0o600)
        var jwk = try key.jwk()
        jwk.kid = "broker-client-1"
        let jwkFile = directory.appendingPathComponent("client.jwk").path
        try JSONEncoder().encode(jwk).write(to: URL(fileURLWithPath: jwkFile))
        let (provider, issuer) = try await Self.authlib(["--client-jwk", jwkFile])
        defer { provider.close() }
        let server = try await BrokerProcess.start(
            config: Self.config(
                issuer: issuer,
                #""client_id": "authlib-client", "token_endpoint_auth_method": "private_key_jwt", "private_key_file": "\#(keyFile)", "key_id": "broker-client-1""#
            ))
        defer { server.stop() }
        let client = try ClientHome(server: server)
        let (signedIn, _) = try await CLIBrowserLoginTests.login(
            server, client, provider: "upstream", browser: ["BROWSER_ACCOUNT": "ada"])
        #expect(signedIn.status == 0, "\(signedIn.stderr)")
        #expect(try client.cached()?.userID.description == "upstream:authlib-ada-0001")

        // A broker configured with a secret the provider does not take is refused at the exchange.
        let secretBroker = try await BrokerProcess.start(
            config: Self.config(issuer: issuer, #""client_id": "authlib-client", "client_secret": "guess""#))
        defer { secretBroker.stop() }
        let other = try ClientHome(server: secretBroker)
        let (refused, _) = try await CLIBrowserLoginTests.login(
            secretBroker, other, provider: "upstream", browser: ["BROWSER_ACCOUNT": "ada"])
        #expect(refused.status == 1 && refused.stderr.contains("code exchange was refused"), "\(refused.stderr)")
        #expect(try other.cached() == nil)
    }
}

/// Upstreams that answer badly (Tests/Interop/bad_upstream.py) — slowly, with HTML, with a huge body, with an
/// error page — and subjects that belong to someone else: each ends in a clear message and exit 1 at the CLI,
/// nothing cached and no user written.
@Suite("a provider of type oidc when the upstream answers badly, and linking across the new providers")
struct BadUpstreamTests {
    @Test func eachBadAnswerIsAClearFailureAndWritesNothing() async throws {
        let script = TestPaths.interop("bad_upstream.py")
        let upstream = try await offThread { try ScriptServer(script, prefix: "listening ") }
        defer { upstream.close() }
        let modes: [(String, String)] = [
            ("discovery-html", "not JSON"), ("discovery-huge", "discovery"), ("discovery-slow", "discovery"),
            ("token-html", "code exchange was refused"), ("token-huge", "token endpoint"),
            ("token-slow", "token endpoint"), ("token-500", "HTTP 500"),
        ]
        let sections = modes.map { mode, _ in
            #""\#(mode)": {"type": "oidc", "issuer": "\#(upstream.ready)/\#(mode)", "client_id": "c", "client_secret": "s"}"#
        }.joined(separator: ", ")
        // One second for every outbound call: the slow upstream is given up on, whatever the machine's speed.
        let server = try await BrokerProcess.start(
            config: #"{"server": {"http_timeout": 1}, "providers": {\#(sections)}}"#)
        defer { server.stop() }
        for (mode, reason) in modes {
            let client = try ClientHome(server: server)
            let (result, page) = try await CLIBrowserLoginTests.login(server, client, provider: mode)
            #expect(result.status == 1, "\(mode): \(result.stderr)")
            #expect(result.stderr.contains(reason), "\(mode): \(result.stderr)")
            if mode.hasPrefix("token") { #expect(page?["page_status"]?.intValue == 400, "\(mode)") }
            #expect(try client.cached() == nil, "\(mode)")
        }
        let users = try await CLI.run(["users", "list", "--json", "--data-dir", server.dataDirectory])
        #expect(users.status == 0 && JSONValue.parse(Array(users.stdout.utf8))?["users"] == [], "\(users.stdout)")
    }

    /// An upstream behind a private CA: trusted through `server.ca_file` (its discovery and keys fetched, the
    /// browser sent on), refused without it — the waiting CLI told why.
    @Test func anUpstreamBehindAPrivateCAIsTrustedThroughCAFile() async throws {
        let directory = try BrokerProcess.temporaryDirectory()
        let ca = directory.appendingPathComponent("ca.pem").path
        let script = TestPaths.interop("bad_upstream.py")
        let upstream = try await offThread { try ScriptServer(script, ["--https", ca], prefix: "listening ") }
        defer { upstream.close() }
        #expect(upstream.ready.hasPrefix("https://127.0.0.1:"))
        let section =
            #""private": {"type": "oidc", "issuer": "\#(upstream.ready)/token-500", "client_id": "c", "client_secret": "s"}"#
        let start =
            "/auth/private/start?redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcallback&state=s"
            + "&code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256"
        let trusting = try await BrokerProcess.start(
            config: #"{"server": {"ca_file": "\#(ca)"}, "providers": {\#(section)}}"#)
        defer { trusting.stop() }
        let sent = try await trusting.get(start)
        #expect(sent.status == 302)
        #expect(sent.header("Location")?.hasPrefix(upstream.ready + "/token-500/authorize?") == true)
        let untrusting = try await BrokerProcess.start(config: #"{"providers": {\#(section)}}"#)
        defer { untrusting.stop() }
        let refused = try await untrusting.get(start)
        let location = try #require(refused.header("Location"))
        #expect(refused.status == 302 && location.hasPrefix("http://127.0.0.1:9/callback?"), "\(location)")
        let query = Dictionary(
            uniqueKeysWithValues: FormEncoding.decode(String(location.split(separator: "?")[1]))?.map { ($0.0, $0.1) }
                ?? [])
        #expect(query["error"] == "temporarily_unavailable" && query["state"] == "s")
        #expect(query["error_description"]?.lowercased().contains("certificate") == true, "\(query)")
    }

    /// A custom account links GitHub, Apple and corp through the CLI; each then signs in as that user. Another
    /// user who tries to link one of them is refused, and keeps what they had.
    @Test func linkingWorksAcrossTheNewProviders() async throws {
        let emulator = try await EmulatorProcess.start()
        let server = try await BrokerProcess.start(config: emulator.brokerConfig)
        defer { server.stop() }
        let ada = try ClientHome(server: server)
        try await ada.register("ada@example.com")
        let adaID = try #require(try ada.cached()).userID
        for (provider, account) in [("github", "octocat"), ("apple", "ada"), ("corp", "alice")] {
            let (linked, _) = try await CLIBrowserLoginTests.login(
                ada, provider: provider, browser: ["BROWSER_ACCOUNT": account], command: "link")
            #expect(linked.status == 0, "\(provider): \(linked.stderr)")
            let laptop = try ClientHome(server: server)
            let (signedIn, _) = try await CLIBrowserLoginTests.login(
                laptop, provider: provider, browser: ["BROWSER_ACCOUNT": account])
            #expect(signedIn.status == 0, "\(provider): \(signedIn.stderr)")
            #expect(try laptop.cached()?.userID == adaID, "\(provider) signs in as Ada")
        }
        let listed = try #require(JSONValue.parse(Array(try await ada.run(["whoami", "--json"]).stdout.utf8)))
        #expect(
            listed["identities"]?.arrayValue?.compactMap { $0["provider"]?.stringValue }
                == ["custom", "github", "apple", "corp"], "\(listed)")

        let bob = try ClientHome(server: server)
        try await bob.register("bob@example.com")
        let before = try await bob.run(["whoami", "--json"]).stdout
        let (refused, page) = try await CLIBrowserLoginTests.login(
            bob, provider: "corp", browser: ["BROWSER_ACCOUNT": "alice"], command: "link")
        #expect(refused.status == 1 && refused.stderr.contains("already signs in as another broker user"))
        #expect(page?["page_status"]?.intValue == 400)
        let after = try await bob.run(["whoami", "--json"]).stdout
        #expect(
            JSONValue.parse(Array(before.utf8))?["identities"] == JSONValue.parse(Array(after.utf8))?["identities"],
            "Bob's ways in are what they were")
    }
}
