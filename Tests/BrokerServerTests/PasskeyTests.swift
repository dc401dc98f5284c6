import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// Passkeys in process: added through `broker passkey add`'s ticket and page, then signing in to an app, to the
/// CLI's loopback page and on `/device`, each with a software authenticator; the refusals a relying party owes
/// (a spent challenge, a counter that went back, a removed passkey, a ticket used twice) and passkeys off on an
/// IP-address issuer.
@Suite("passkeys: adding one and signing in with it")
struct PasskeyTests {
    typealias Reply = InProcessBroker.Client.Reply
    typealias Jar = OpenIDProviderTests.Jar
    typealias Flow = InProcessBrowserFlowTests
    static let password = "correct horse battery staple"
    static let config = #"{"providers": {"custom": {"enabled": true}}}"#

    static func ceremony(_ broker: InProcessBroker) -> SoftAuthenticator.Ceremony {
        SoftAuthenticator.Ceremony(origin: "http://broker.test", rpID: "broker.test")
    }

    static func unescape(_ html: String) -> String {
        html.replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&#39;", with: "'")
            .replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
            .replacingOccurrences(of: "&amp;", with: "&")
    }

    static func attribute(_ reply: Reply, _ name: String) -> String? {
        let html = String(decoding: reply.body, as: UTF8.self)
        guard let range = html.range(of: "\(name)=\"") else { return nil }
        return unescape(String(html[range.upperBound...].prefix { $0 != "\"" }))
    }

    static func hidden(_ reply: Reply, _ name: String) -> String? {
        OpenIDProviderTests.hidden(reply, name).map(unescape)
    }

    /// A CLI session (email + password) and its account token.
    static func signedIn(_ client: InProcessBroker.Client, _ email: String) async throws -> (
        session: Reply, account: String
    ) {
        let session = try await client.register(email, password)
        #expect(session.status == 201, "\(String(describing: session.json))")
        let account = try await client.accountToken(refreshToken: try #require(session["refresh_token"]?.stringValue))
        return (session, account)
    }

    /// `broker passkey add` as the broker sees it: the ticket, the page, the authenticator, the form.
    @discardableResult
    static func addPasskey(
        _ client: InProcessBroker.Client, account: String, authenticator: SoftAuthenticator,
        _ ceremony: SoftAuthenticator.Ceremony, name: String = "Laptop"
    ) async throws -> Reply {
        let ticket = try await client.send(
            .post, "/auth/passkey/ticket", headers: [.authorization: "Bearer \(account)"])
        #expect(ticket.status == 200 && ticket["expires_in"] == 600, "\(String(describing: ticket.json))")
        let url = try #require(ticket["url"]?.stringValue)
        #expect(url.hasPrefix("http://broker.test/auth/passkey/add?ticket="))
        return try await registerOnPage(
            client, String(url.dropFirst("http://broker.test".count)), authenticator: authenticator, ceremony,
            name: name)
    }

    /// The page at `path` that adds a passkey (from a ticket or a recovery mail), answered by `authenticator`.
    static func registerOnPage(
        _ client: InProcessBroker.Client, _ path: String, authenticator: SoftAuthenticator,
        _ ceremony: SoftAuthenticator.Ceremony, name: String = "Laptop"
    ) async throws -> Reply {
        let jar = Jar()
        let page = try await OpenIDProviderTests.get(client, path, jar)
        #expect(page.status == 200 && page.header("Content-Security-Policy") == Page.passkeyPolicy)
        let text = try #require(Self.attribute(page, "data-options"))
        let options = try #require(JSONValue.parse(Array(text.utf8)))
        #expect(options["rp"]?["id"] == "broker.test" && options["attestation"] == "none")
        #expect(options["authenticatorSelection"]?["residentKey"] == "required")
        let handle = try #require(options["user"]?["id"]?.stringValue.flatMap(Base64URL.decode))
        #expect(handle.count == 32, "a random handle, never the email")
        let challenge = try #require(options["challenge"]?.stringValue.flatMap(Base64URL.decode))
        let response = try authenticator.register(challenge: challenge, userHandle: handle, ceremony)
        return try await OpenIDProviderTests.post(
            client, "/auth/passkey/add",
            [
                ("ceremony", try #require(hidden(page, "ceremony"))), ("csrf", try #require(hidden(page, "csrf"))),
                ("credential", response.json.serialized()), ("name", name),
            ], jar)
    }

    static let loopbackRedirect = "http://127.0.0.1:5555/callback"

    /// `broker login --provider passkey` as the broker sees it: the loopback page, the assertion, the code at
    /// the CLI's redirect URI (`destination`), and the session the code was redeemed for.
    static func passkeyLoopbackSignIn(
        _ client: InProcessBroker.Client, _ authenticator: SoftAuthenticator, _ ceremony: SoftAuthenticator.Ceremony,
        state: String = "s"
    ) async throws -> (destination: String, session: Reply) {
        let pkce = try PKCE.generate()
        let jar = Jar()
        let page = try await OpenIDProviderTests.get(
            client,
            "/auth/passkey/start?"
                + FormEncoding.encode([
                    ("redirect_uri", loopbackRedirect), ("state", state), ("code_challenge", pkce.challenge),
                    ("code_challenge_method", "S256"),
                ]), jar)
        #expect(page.status == 200, "\(String(decoding: page.body, as: UTF8.self))")
        let (sealed, credential) = try await assertion(client, authenticator, ceremony)
        let finished = try await OpenIDProviderTests.post(
            client, "/auth/passkey/finish",
            [
                ("flow", try #require(hidden(page, "flow"))), ("csrf", try #require(hidden(page, "csrf"))),
                ("ceremony", sealed), ("credential", credential),
            ], jar)
        let destination = try #require(OpenIDProviderTests.destination(finished))
        let code = try #require(Flow.query(destination)["code"])
        let session = try await client.form(
            "/auth/token",
            [
                ("grant_type", "authorization_code"), ("code", code), ("code_verifier", pkce.verifier),
                ("redirect_uri", loopbackRedirect),
            ])
        return (destination, session)
    }

    /// The account token of a CLI session signed in with a passkey (``passkeyLoopbackSignIn``).
    static func passkeyAccountToken(
        _ client: InProcessBroker.Client, _ authenticator: SoftAuthenticator, _ ceremony: SoftAuthenticator.Ceremony
    ) async throws -> String {
        let (_, session) = try await passkeyLoopbackSignIn(client, authenticator, ceremony)
        #expect(session["provider"] == "passkey")
        return try await client.accountToken(refreshToken: try #require(session["refresh_token"]?.stringValue))
    }

    /// A discoverable sign-in's options and the authenticator's answer to them.
    static func assertion(
        _ client: InProcessBroker.Client, _ authenticator: SoftAuthenticator, _ ceremony: SoftAuthenticator.Ceremony
    ) async throws -> (ceremony: String, credential: String) {
        let options = try await client.post("/auth/passkey/options", json: [:])
        #expect(options.status == 200 && options["publicKey"]?["userVerification"] == "required")
        #expect(options["publicKey"]?["allowCredentials"] == [], "discoverable: no email first, no list")
        let challenge = try #require(options["publicKey"]?["challenge"]?.stringValue.flatMap(Base64URL.decode))
        let response = try authenticator.assert(challenge: challenge, ceremony)
        return (try #require(options["ceremony"]?.stringValue), response.json.serialized())
    }

    @Test func aPasskeyIsAddedListedUsedForAnAppAndRemoved() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        try await OpenIDProviderTests.register(broker, firstParty: true)
        let authenticator = try SoftAuthenticator(algorithm: .es256, counter: 0)
        let ceremony = Self.ceremony(broker)
        try await broker.test { client in
            let (_, account) = try await Self.signedIn(client, "ada@example.com")
            let added = try await Self.addPasskey(client, account: account, authenticator: authenticator, ceremony)
            #expect(added.status == 200, "\(String(decoding: added.body, as: UTF8.self))")
            #expect(String(decoding: added.body, as: UTF8.self).contains("“Laptop” now signs you in"))

            let listed = try await client.get("/auth/passkeys", bearer: account)
            let entry = try #require(listed["passkeys"]?.arrayValue?.first)
            #expect(entry["name"] == "Laptop" && entry["algorithm"] == "ES256" && entry["last_used_at"] == .null)
            #expect(entry["id"]?.stringValue == Base64URL.encode(authenticator.credentialID))

            // The app's sign-in page offers the passkey (and the email field its autofill); the passkey signs in.
            let jar = Jar()
            let page = try await OpenIDProviderTests.get(
                client, OpenIDProviderTests.authorizeURI(OpenIDProviderTests.webRequest()), jar)
            let html = String(decoding: page.body, as: UTF8.self)
            #expect(html.contains(#"data-passkey="signin""#) && html.contains("Sign in with a passkey"))
            #expect(html.contains(#"autocomplete="username webauthn""#))
            #expect(page.header("Content-Security-Policy") == Page.passkeyPolicy)
            let (sealed, credential) = try await Self.assertion(client, authenticator, ceremony)
            let signedIn = try await OpenIDProviderTests.post(
                client, "/auth/authorize/passkey",
                [
                    ("request", try #require(Self.hidden(page, "request"))),
                    ("csrf", try #require(Self.hidden(page, "csrf"))), ("ceremony", sealed), ("credential", credential),
                ], jar)
            let destination = try #require(OpenIDProviderTests.destination(signedIn), "\(signedIn.status)")
            let code = try #require(Flow.query(destination)["code"])
            let tokens = try await OpenIDProviderTests.redeem(client, code: code)
            let idToken = try #require(tokens["id_token"]?.stringValue, "\(String(describing: tokens.json))")
            let claims = try #require(jwtParts(idToken).claims)
            #expect(claims["email"] == "ada@example.com")
            let accessToken = try #require(tokens["access_token"]?.stringValue)
            let access = try #require(jwtParts(accessToken).claims)
            #expect(access["idp"] == "passkey", "the way in of this session")
            #expect(
                try await client.get("/auth/passkeys", bearer: account)["passkeys"]?.arrayValue?.first?["last_used_at"]
                    != .null)

            // The same ceremony again: its challenge was spent.
            let replay = try await OpenIDProviderTests.post(
                client, "/auth/authorize/passkey",
                [
                    ("request", try #require(Self.hidden(page, "request"))),
                    ("csrf", try #require(Self.hidden(page, "csrf"))), ("ceremony", sealed), ("credential", credential),
                ], jar)
            #expect(replay.status == 400)
            #expect(String(decoding: replay.body, as: UTF8.self).contains("already used"))

            // Removed: it signs in no more; removing it again is 404.
            // The account export carries it (public parts only).
            let exported = try await client.get("/auth/account/export", bearer: account)
            let carried = try #require(exported["passkeys"]?.arrayValue?.first, "\(exported.status)")
            #expect(carried["name"] == "Laptop" && carried["public_key_cose"]?.stringValue?.isEmpty == false)

            let id = Base64URL.encode(authenticator.credentialID)
            // The account has two factors now: the password's session (one) is asked to step up (RFC 9470), and
            // nothing is removed; a session signed in with the passkey removes it.
            let weak = try await client.send(
                .post, "/auth/passkeys/remove",
                headers: [.authorization: "Bearer \(account)", .contentType: "application/json"],
                body: Array(#"{"id":"\#(id)"}"#.utf8))
            #expect(weak.status == 401 && weak.error == "insufficient_user_authentication")
            let challenge = try #require(weak.header("WWW-Authenticate"))
            #expect(challenge.hasPrefix("Bearer error=\"insufficient_user_authentication\""), "\(challenge)")
            #expect(challenge.contains(#"acr_values="2""#) && !challenge.contains("max_age"), "\(challenge)")
            #expect(try await broker.store.passkey(id: id) != nil)
            let strong = try await Self.passkeyAccountToken(client, authenticator, ceremony)
            let removed = try await client.send(
                .post, "/auth/passkeys/remove",
                headers: [.authorization: "Bearer \(strong)", .contentType: "application/json"],
                body: Array(#"{"id":"\#(id)"}"#.utf8))
            #expect(removed.status == 200 && removed["removed"]?.stringValue == id)
            let again = try await client.send(
                .post, "/auth/passkeys/remove",
                headers: [.authorization: "Bearer \(account)", .contentType: "application/json"],
                body: Array(#"{"id":"\#(id)"}"#.utf8))
            #expect(again.status == 404)
            // A browser without the broker's session (the first one is signed in now).
            let jar2 = Jar()
            let page2 = try await OpenIDProviderTests.get(
                client, OpenIDProviderTests.authorizeURI(OpenIDProviderTests.webRequest()), jar2)
            let (sealed2, credential2) = try await Self.assertion(client, authenticator, ceremony)
            let refused = try await OpenIDProviderTests.post(
                client, "/auth/authorize/passkey",
                [
                    ("request", try #require(Self.hidden(page2, "request"))),
                    ("csrf", try #require(Self.hidden(page2, "csrf"))), ("ceremony", sealed2),
                    ("credential", credential2),
                ], jar2)
            #expect(refused.status == 400)
            #expect(String(decoding: refused.body, as: UTF8.self).contains("not registered with this broker"))
        }
    }

    /// An account that dropped its password keeps its confirmed address: losing its passkeys, it asks on the
    /// forgot form, follows the mailed link and registers a new one; every session ends; the link works once.
    @Test func anAccountWithPasskeysOnlyRecoversByMailAtItsConfirmedAddress() async throws {
        let sink = try await SMTPSink.start()
        let broker = try await InProcessBroker(
            config: #"""
                {"providers": {"custom": {"enabled": true}},
                 "mail": {"url": "\#(sink.url)", "from": "Broker <broker@example.com>"}}
                """#)
        try await OpenIDProviderTests.register(broker, firstParty: true)
        let lost = try SoftAuthenticator(algorithm: .es256, counter: 0)
        let fresh = try SoftAuthenticator(algorithm: .edDSA, counter: 0)
        let ceremony = Self.ceremony(broker)
        try await broker.test { client in
            let (_, password) = try await Self.signedIn(client, "ada@example.com")
            await broker.service.mailer?.flush()
            let verify = try #require(try VerificationTests.mailedToken(sink, to: "ada@example.com"))
            #expect(try await VerificationTests().confirm(client, token: verify).status == 200)
            #expect(try await Self.addPasskey(client, account: password, authenticator: lost, ceremony).status == 200)

            // Signed in with the passkey, the password goes: the passkey is now the way in, and it cannot go in turn.
            let account = try await Self.passkeyAccountToken(client, lost, ceremony)
            let unlinked = try await client.send(
                .post, "/auth/unlink",
                headers: [.contentType: "application/json", .authorization: "Bearer \(account)"],
                body: Array(#"{"provider":"custom"}"#.utf8))
            #expect(unlinked.status == 200, "\(String(describing: unlinked.json))")
            let id = Base64URL.encode(lost.credentialID)
            let last = try await client.send(
                .post, "/auth/passkeys/remove",
                headers: [.authorization: "Bearer \(account)", .contentType: "application/json"],
                body: Array(#"{"id":"\#(id)"}"#.utf8))
            #expect(last.status == 409 && last.error == "last_identity", "\(String(describing: last.json))")
            #expect(last["error_description"]?.stringValue?.contains("broker passkey add") == true)
            let user = try #require(try await broker.store.passkey(id: id)?.userID, "still there")
            let export = try await client.get("/auth/account/export", bearer: account)
            #expect(export["recovery_address"]?["email"] == "ada@example.com")

            // The forgot form answers as for any address; the mail is a recovery link, not a reset.
            let forgot = try await client.get("/auth/password/forgot")
            #expect(String(decoding: forgot.body, as: UTF8.self).contains("lost your passkey"))
            let asked = try await client.post("/auth/password/forgot", json: ["email": "Ada@Example.com"])
            let unknown = try await client.post("/auth/password/forgot", json: ["email": "nobody@example.com"])
            #expect(asked.status == 202 && unknown.status == asked.status && unknown.body == asked.body)
            await broker.service.mailer?.flush()
            #expect(try PasswordRecoveryTests.mailedToken(sink, to: "ada@example.com") == nil, "no password to reset")
            let token = try #require(
                try sink.mailedToken(
                    to: "ada@example.com", subject: "Add a new passkey to your account", path: "/auth/passkey/recover"))
            #expect(try sink.messages().filter { $0["to"]?.stringValue == "nobody@example.com" }.isEmpty)

            // Opening the link (a mail scanner, a second tab) spends nothing.
            let scanned = try await client.get("/auth/passkey/recover?token=" + token)
            #expect(scanned.status == 200 && String(decoding: scanned.body, as: UTF8.self).contains("Recover"))
            let secondTab = Jar()
            let tab = try await OpenIDProviderTests.get(client, "/auth/passkey/recover?token=" + token, secondTab)
            #expect(tab.status == 200)

            let recovered = try await Self.registerOnPage(
                client, "/auth/passkey/recover?token=" + token, authenticator: fresh, ceremony, name: "New phone")
            #expect(recovered.status == 200, "\(String(decoding: recovered.body, as: UTF8.self))")
            #expect(
                String(decoding: recovered.body, as: UTF8.self).contains("Every session of this account was signed out")
            )
            #expect(try await broker.store.passkeys(user: user).map(\.name).sorted() == ["Laptop", "New phone"])
            #expect(try await client.get("/auth/passkeys", bearer: account).status == 401, "the old session ended")

            // The link worked once: the second tab's ceremony is refused and adds nothing; the link is gone.
            let options = try #require(Self.attribute(tab, "data-options")).utf8
            let challenge = try #require(
                JSONValue.parse(Array(options))?["challenge"]?.stringValue.flatMap(Base64URL.decode))
            let handle = try #require(
                JSONValue.parse(Array(options))?["user"]?["id"]?.stringValue.flatMap(Base64URL.decode))
            let third = try SoftAuthenticator(algorithm: .es256, counter: 0)
            let late = try await OpenIDProviderTests.post(
                client, "/auth/passkey/add",
                [
                    ("ceremony", try #require(Self.hidden(tab, "ceremony"))),
                    ("csrf", try #require(Self.hidden(tab, "csrf"))),
                    (
                        "credential",
                        try third.register(challenge: challenge, userHandle: handle, ceremony).json.serialized()
                    ),
                ], secondTab)
            #expect(late.status == 400 && String(decoding: late.body, as: UTF8.self).contains("already used"))
            #expect(try await broker.store.passkeys(user: user).count == 2)
            let gone = try await client.get("/auth/passkey/recover?token=" + token)
            #expect(gone.status == 400 && String(decoding: gone.body, as: UTF8.self).contains("no longer works"))

            // The new passkey signs in to an app.
            let jar = Jar()
            let page = try await OpenIDProviderTests.get(
                client, OpenIDProviderTests.authorizeURI(OpenIDProviderTests.webRequest()), jar)
            #expect(String(decoding: page.body, as: UTF8.self).contains("lost your passkey?"))
            let (sealed, credential) = try await Self.assertion(client, fresh, ceremony)
            let signedIn = try await OpenIDProviderTests.post(
                client, "/auth/authorize/passkey",
                [
                    ("request", try #require(Self.hidden(page, "request"))),
                    ("csrf", try #require(Self.hidden(page, "csrf"))), ("ceremony", sealed), ("credential", credential),
                ], jar)
            #expect(OpenIDProviderTests.destination(signedIn) != nil, "\(signedIn.status)")
        }
    }

    /// No recovery mail for an account that still has another way in, or an address never confirmed.
    @Test func recoveryByMailNeedsAConfirmedAddressAndPasskeysOnly() async throws {
        let sink = try await SMTPSink.start()
        let broker = try await InProcessBroker(
            config: #"""
                {"providers": {"custom": {"enabled": true}},
                 "mail": {"url": "\#(sink.url)", "from": "Broker <broker@example.com>"}}
                """#)
        let ceremony = Self.ceremony(broker)
        try await broker.test { client in
            let (_, account) = try await Self.signedIn(client, "unconfirmed@example.com")
            let authenticator = try SoftAuthenticator(algorithm: .es256, counter: 0)
            #expect(
                try await Self.addPasskey(client, account: account, authenticator: authenticator, ceremony).status
                    == 200)
            // With a passkey the account has two factors: the password's session may not unlink (RFC 9470).
            let weak = try await client.send(
                .post, "/auth/unlink",
                headers: [.contentType: "application/json", .authorization: "Bearer \(account)"],
                body: Array(#"{"provider":"custom"}"#.utf8))
            #expect(weak.status == 401 && weak.error == "insufficient_user_authentication")
            let passkeyAccount = try await Self.passkeyAccountToken(client, authenticator, ceremony)
            let unlinked = try await client.send(
                .post, "/auth/unlink",
                headers: [.contentType: "application/json", .authorization: "Bearer \(passkeyAccount)"],
                body: Array(#"{"provider":"custom"}"#.utf8))
            #expect(unlinked.status == 200)
            #expect(try await client.get("/auth/account/export", bearer: passkeyAccount)["recovery_address"] == .null)
            #expect(
                try await client.post("/auth/password/forgot", json: ["email": "unconfirmed@example.com"]).status == 202
            )
            await broker.service.mailer?.flush()
            #expect(
                try sink.messages().filter { $0["subject"]?.stringValue == "Add a new passkey to your account" }.isEmpty
            )
            // A link that is not one: the page says so and nothing changes.
            for bad in ["", "short", String(repeating: "A", count: 43)] {
                let page = try await client.get("/auth/passkey/recover?token=" + bad)
                #expect(page.status == 400 && String(decoding: page.body, as: UTF8.self).contains("no longer works"))
            }
        }
    }

    @Test func theAccountAPINeedsAnAccountTokenAndATicketWorksOnce() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        try await broker.test { client in
            let (session, account) = try await Self.signedIn(client, "grace@example.com")
            let access = try #require(session["access_token"]?.stringValue)
            // An API access token proves possession, never the right to add a way in (RT2-1).
            let refused = try await client.send(
                .post, "/auth/passkey/ticket", headers: [.authorization: "Bearer \(access)"])
            #expect(refused.status == 401 && refused.error == "invalid_token")
            #expect(try await client.get("/auth/passkeys", bearer: access).status == 401)

            let ticket = try await client.send(
                .post, "/auth/passkey/ticket", headers: [.authorization: "Bearer \(account)"])
            let path = String(try #require(ticket["url"]?.stringValue).dropFirst("http://broker.test".count))
            #expect(try await client.get(path).status == 200)
            let second = try await client.get(path)
            #expect(second.status == 400 && String(decoding: second.body, as: UTF8.self).contains("work once"))
            // A tampered ticket, and none.
            #expect(try await client.get(path.replacingOccurrences(of: "ticket=", with: "ticket=x")).status == 400)
            #expect(try await client.get("/auth/passkey/add").status == 400)
            // A form posted without the page's cookie.
            let stale = try await client.form(
                "/auth/passkey/add", [("ceremony", "x"), ("csrf", "y"), ("credential", "{}")])
            #expect(stale.status == 403)
        }
    }

    @Test func aCounterThatWentBackAndAMalformedAnswerAreRefused() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        try await OpenIDProviderTests.register(broker, firstParty: true)
        let authenticator = try SoftAuthenticator(counter: 10)
        let ceremony = Self.ceremony(broker)
        var backwards = ceremony
        backwards.counter = 5
        try await broker.test { [backwards] client in
            let (_, account) = try await Self.signedIn(client, "cnt@example.com")
            #expect(
                try await Self.addPasskey(client, account: account, authenticator: authenticator, ceremony).status
                    == 200)
            let jar = Jar()
            for (credentialEdit, says) in [
                ({ (text: String) in text }, "counter did not increase"),
                ({ (_: String) in "{\"type\":\"public-key\"" }, "could not be read"),
            ] {
                let page = try await OpenIDProviderTests.get(
                    client, OpenIDProviderTests.authorizeURI(OpenIDProviderTests.webRequest()), jar)
                let (sealed, credential) = try await Self.assertion(client, authenticator, backwards)
                let reply = try await OpenIDProviderTests.post(
                    client, "/auth/authorize/passkey",
                    [
                        ("request", try #require(Self.hidden(page, "request"))),
                        ("csrf", try #require(Self.hidden(page, "csrf"))), ("ceremony", sealed),
                        ("credential", credentialEdit(credential)),
                    ], jar)
                #expect(reply.status == 400)
                #expect(String(decoding: reply.body, as: UTF8.self).contains(says))
            }
            let owner = try await broker.store.passwordAccount(email: "cnt@example.com")?.user.id
            let stored = try await broker.store.passkeys(user: try #require(owner))
            #expect(stored.first?.signCount == 11, "the refused counter was not stored")
            // Deleting the account removes its passkeys (a sign-in with the passkey first: two factors).
            let strong = try await Self.passkeyAccountToken(client, authenticator, ceremony)
            let deleted = try await client.send(
                .post, "/auth/account/delete",
                headers: [.authorization: "Bearer \(strong)", .contentType: "application/json"],
                body: Array(#"{"password":"\#(Self.password)"}"#.utf8))
            #expect(deleted.status == 200, "\(String(describing: deleted.json))")
            #expect(try await broker.store.passkey(id: Base64URL.encode(authenticator.credentialID)) == nil)
        }
    }

    @Test func theCLIsLoopbackPageAndTheDevicePageSignInWithAPasskey() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        let authenticator = try SoftAuthenticator()
        let ceremony = Self.ceremony(broker)
        try await broker.test { client in
            let (_, account) = try await Self.signedIn(client, "term@example.com")
            #expect(
                try await Self.addPasskey(client, account: account, authenticator: authenticator, ceremony).status
                    == 200)

            // broker login --provider passkey: the loopback page, then a code for the CLI.
            let (destination, session) = try await Self.passkeyLoopbackSignIn(
                client, authenticator, ceremony, state: "cli-state")
            #expect(destination.hasPrefix(Self.loopbackRedirect + "?"))
            let back = Flow.query(destination)
            #expect(back["state"] == "cli-state" && back["iss"] == "http://broker.test")
            #expect(session.status == 200 && session["provider"] == "passkey", "\(String(describing: session.json))")
            // A non-loopback redirect is refused before any page.
            let evil = try await client.get(
                "/auth/passkey/start?"
                    + FormEncoding.encode([("redirect_uri", "https://evil.example/cb"), ("state", "s")]))
            #expect(evil.status == 400 && evil.error == "invalid_request")

            // The device flow: a terminal elsewhere, approved with the passkey.
            let started = try await InProcessDeviceTests.authorize(client)
            let userCode = try #require(started["user_code"]?.stringValue)
            let deviceJar = Jar()
            let choice = try await OpenIDProviderTests.get(
                client, "/device?" + FormEncoding.encode([("user_code", userCode)]), deviceJar)
            #expect(String(decoding: choice.body, as: UTF8.self).contains("/auth/device/passkey"))
            let (sealed2, credential2) = try await Self.assertion(client, authenticator, ceremony)
            let confirm = try await OpenIDProviderTests.post(
                client, "/auth/device/passkey",
                [
                    ("user_code", try #require(Self.hidden(choice, "user_code"))),
                    ("csrf", try #require(Self.hidden(choice, "csrf"))), ("ceremony", sealed2),
                    ("credential", credential2),
                ], deviceJar)
            #expect(confirm.status == 200)
            #expect(String(decoding: confirm.body, as: UTF8.self).contains("term@example.com"))
        }
    }

    @Test func anIPAddressIssuerHasPasskeysOffAndSaysWhy() async throws {
        let broker = try await InProcessBroker(config: Self.config, issuer: "http://127.0.0.1:8787")
        try await OpenIDProviderTests.register(broker, firstParty: true)
        guard case .off(reason: let reason) = broker.service.passkeys.settings else {
            Issue.record("passkeys on at an IP address")
            return
        }
        #expect(reason.contains("server.webauthn_rp_id") && reason.contains("127.0.0.1"))
        try await broker.test { client in
            #expect(try await client.post("/auth/passkey/options", json: [:]).status == 404)
            let page = try await client.get(OpenIDProviderTests.authorizeURI(OpenIDProviderTests.webRequest()))
            #expect(!String(decoding: page.body, as: UTF8.self).contains("passkey"))
            #expect(page.header("Content-Security-Policy")?.contains("script-src") == false, "no script at all")
        }
    }

    @Test(
        arguments: [
            ("http://127.0.0.1:8787", nil, false), ("http://localhost:8787", nil, true),
            ("https://login.example.com", "example.com", true), ("https://login.example.com", "other.com", false),
            ("http://127.0.0.1:8787", "localhost", false), ("http://[::1]:8787", nil, false),
        ] as [(String, String?, Bool)])
    func theRelyingPartyIDFollowsTheIssuer(issuer: String, configured: String?, on: Bool) {
        let settings = PasskeySettings.resolve(issuer: issuer, configured: configured)
        if case .on = settings { #expect(on) } else { #expect(!on, "\(settings)") }
        if issuer == "https://login.example.com", configured == "example.com" {
            #expect(settings == .on(rpID: "example.com", origin: "https://login.example.com"))
        }
    }

    /// Issue "A second factor" §1: a passkey may be the second factor. After the password, the code page of an
    /// account with an authenticator app and a passkey offers the passkey instead of the code; the passkey of
    /// another account signs nobody in there.
    @Test func aPasskeyOfTheSameAccountIsTheSecondStepAfterThePassword() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        try await OpenIDProviderTests.register(broker, firstParty: true)
        let mine = try SoftAuthenticator(algorithm: .es256, counter: 0)
        let theirs = try SoftAuthenticator(algorithm: .es256, counter: 0)
        let ceremony = Self.ceremony(broker)
        try await broker.test { client in
            let (_, account) = try await Self.signedIn(client, "ada@example.com")
            try await Self.addPasskey(client, account: account, authenticator: mine, ceremony)
            let (_, other) = try await Self.signedIn(client, "bob@example.com")
            try await Self.addPasskey(client, account: other, authenticator: theirs, ceremony)
            // The authenticator app, enrolled with the password (the account has two factors already).
            let started = try await SecondFactorTests.postJSON(
                client, "/auth/mfa/totp", ["email": "ada@example.com", "password": .string(Self.password)])
            let key = try #require(started["key"]?.stringValue, "\(String(describing: started.json))")
            let confirmed = try await SecondFactorTests.postJSON(
                client, "/auth/mfa/totp/confirm",
                [
                    "enrolment": .string(try #require(started["enrolment"]?.stringValue)),
                    "code": .string(try AccountPageTests.code(key, broker)),
                ])
            #expect(confirmed.status == 201)

            let jar = Jar()
            let page = try await OpenIDProviderTests.get(
                client, OpenIDProviderTests.authorizeURI(OpenIDProviderTests.webRequest()), jar)
            let codePage = try await OpenIDProviderTests.passwordSignIn(
                client, page: page, jar, email: "ada@example.com")
            let html = String(decoding: codePage.body, as: UTF8.self)
            #expect(html.contains("Two-step sign-in") && html.contains("Use a passkey instead"))
            #expect(html.contains(#"action="/auth/authorize/mfa-passkey""#))
            #expect(codePage.header("Content-Security-Policy") == Page.passkeyPolicy, "the ceremony's script runs")
            func answer(_ authenticator: SoftAuthenticator, on page: Reply) async throws -> Reply {
                let (sealed, credential) = try await Self.assertion(client, authenticator, ceremony)
                return try await OpenIDProviderTests.post(
                    client, "/auth/authorize/mfa-passkey",
                    [
                        ("request", try #require(Self.hidden(page, "request"))),
                        ("ticket", try #require(Self.hidden(page, "ticket"))),
                        ("csrf", try #require(Self.hidden(page, "csrf"))), ("ceremony", sealed),
                        ("credential", credential),
                    ], jar)
            }
            let wrong = try await answer(theirs, on: codePage)
            #expect(wrong.status == 401 && String(decoding: wrong.body, as: UTF8.self).contains("another account"))
            #expect(jar.cookies["broker_session"] == nil, "nobody signed in")

            let signedIn = try await answer(mine, on: wrong)
            let destination = try #require(OpenIDProviderTests.destination(signedIn), "\(signedIn.status)")
            let code = try #require(Flow.query(destination)["code"])
            let tokens = try await OpenIDProviderTests.redeem(client, code: code)
            let idToken = try #require(tokens["id_token"]?.stringValue, "\(String(describing: tokens.json))")
            let claims = try #require(jwtParts(idToken).claims)
            #expect(claims["email"] == "ada@example.com" && claims["acr"] == "2")

            // The same on the /device page: the password, then the passkey instead of the code.
            typealias Device = InProcessDeviceTests
            let started2 = try await Device.authorize(client)
            let userCode = try #require(started2["user_code"]?.stringValue)
            let devicePage = try await client.get(
                "/device?user_code=" + userCode.lowercased().replacingOccurrences(of: "-", with: ""))
            let deviceCookie = try #require(Device.cookie(devicePage))
            let codeStep = try await Device.post(
                client, "/auth/device/password",
                [
                    ("user_code", try #require(Device.hidden(devicePage, "user_code"))), ("email", "ada@example.com"),
                    ("password", Self.password), ("csrf", try #require(Device.csrf(devicePage))),
                ], cookie: deviceCookie)
            #expect(String(decoding: codeStep.body, as: UTF8.self).contains("Use a passkey instead"))
            #expect(codeStep.header("Content-Security-Policy") == Page.passkeyPolicy)
            func deviceAnswer(_ authenticator: SoftAuthenticator) async throws -> Reply {
                let (sealed, credential) = try await Self.assertion(client, authenticator, ceremony)
                return try await Device.post(
                    client, "/auth/device/mfa-passkey",
                    [
                        ("user_code", try #require(Device.hidden(codeStep, "user_code"))),
                        ("ticket", try #require(Device.hidden(codeStep, "ticket"))),
                        ("csrf", try #require(Device.csrf(codeStep))), ("ceremony", sealed), ("credential", credential),
                    ], cookie: Device.cookie(codeStep) ?? deviceCookie)
            }
            let refused = try await deviceAnswer(theirs)
            #expect(refused.status == 401 && Device.hidden(refused, "approval") == nil)
            let approved = try await deviceAnswer(mine)
            #expect(approved.status == 200 && Device.hidden(approved, "approval") != nil, "the confirmation page")

            // A forged ticket is no way around the password.
            let forged = try await OpenIDProviderTests.post(
                client, "/auth/authorize/mfa-passkey",
                [
                    ("request", try #require(Self.hidden(wrong, "request"))), ("ticket", "forged"),
                    ("csrf", try #require(Self.hidden(wrong, "csrf"))), ("ceremony", "x"), ("credential", "{}"),
                ], Jar())
            #expect(forged.status == 403, "no CSRF cookie in another browser")
        }
    }
}
