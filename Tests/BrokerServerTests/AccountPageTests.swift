import BrokerCore
import BrokerCrypto
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// The account page (`/account`, issue "A second factor, step-up … and an account page" §5) in process: its
/// sign-in through the broker's own pages, what it lists, every form's CSRF check, the changes, and the step-up
/// rule before a change to how the account is reached.
@Suite("The account page")
struct AccountPageTests {
    typealias Reply = InProcessBroker.Client.Reply
    typealias Client = InProcessBroker.Client
    typealias OP = OpenIDProviderTests
    typealias Jar = OpenIDProviderTests.Jar

    static func html(_ reply: Reply) -> String { String(decoding: reply.body, as: UTF8.self) }

    /// A registered password account signed in to the account page in `jar`'s browser (the sign-in page's password
    /// form, and the code step when `key` is given): the page.
    static func signedIn(
        _ broker: InProcessBroker, _ client: Client, _ jar: Jar, email: String, key: String? = nil
    ) async throws -> Reply {
        let page = try await OP.get(client, "/account", jar)
        #expect(page.status == 200)
        #expect(html(page).contains("Sign in to continue to <strong>your account page</strong>"), "\(html(page))")
        var answer = try await OP.passwordSignIn(client, page: page, jar, email: email)
        if let key {
            #expect(html(answer).contains("Two-step sign-in"), "\(html(answer))")
            answer = try await OP.post(
                client, "/auth/authorize/mfa",
                [
                    ("request", try #require(OP.hidden(answer, "request"))),
                    ("ticket", try #require(OP.hidden(answer, "ticket"))),
                    ("csrf", try #require(OP.hidden(answer, "csrf"))), ("otp", try code(key, broker)),
                ], jar)
        }
        #expect(answer.status == 303, "\(html(answer))")
        #expect(answer.header("Location")?.hasPrefix("/account") == true)
        #expect(jar.cookies["broker_session"] != nil)
        return try await OP.get(client, try #require(answer.header("Location")), jar)
    }

    /// The code an authenticator app shows now for the base32 `key`.
    static func code(_ key: String, _ broker: InProcessBroker) throws -> String {
        let bytes = try #require(Base32.decode(key))
        return TOTP.code(key: bytes, step: TOTP.step(at: broker.clock.seconds()))
    }

    /// One of the page's forms, posted with the page's CSRF token.
    static func act(
        _ client: Client, _ jar: Jar, page: Reply, _ action: String, _ fields: [(String, String)] = []
    ) async throws -> Reply {
        try await OP.post(
            client, "/auth/account/page/" + action, fields + [("csrf", try #require(OP.hidden(page, "csrf")))], jar)
    }

    @Test func theAccountPageSignsInThroughTheBrokersOwnPagesAndListsWhatItKeeps() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let registered = try await client.register("ada@example.com", OP.password)
            #expect(registered.status == 201)
            let jar = Jar()
            let page = try await Self.signedIn(broker, client, jar, email: "ada@example.com")
            let text = Self.html(page)
            #expect(page.status == 200)
            #expect(text.contains("<h1>Your account</h1>"))
            #expect(text.contains("Signed in as <strong>ada@example.com</strong> with your password."))
            #expect(text.contains("Email and password") && text.contains("The broker CLI"), "the CLI's session")
            #expect(text.contains("<strong>This browser</strong>"))
            #expect(text.contains("action=\"/auth/account/page/mfa-add\""), "a password account may add a factor")
            #expect(!text.contains("<script"), "no script on the page")
            #expect(page.header("Content-Security-Policy")?.contains("form-action 'self'") == true)
            #expect(page.header("Cache-Control") == "no-store")
            #expect(page.header("Set-Cookie")?.contains("broker_csrf=") == true, "every form's CSRF token")
            // The broker's own sign-in ended in the browser session: no code was minted for the page.
            #expect(try await broker.store.browserSessions(user: nil).count == 1)

            // The said=… query names a fixed sentence; anything else says nothing.
            let said = try await OP.get(client, "/account?said=session-ended", jar)
            #expect(Self.html(said).contains("That session has ended"))
            let made = try await OP.get(client, "/account?said=%3Cscript%3Ealert(1)%3C%2Fscript%3E", jar)
            #expect(!Self.html(made).contains("alert(1)"))

            // The page's client id is reserved like the CLI's, and goes nowhere but /account.
            #expect(AppRules.isReserved("Broker-Account", apiAudience: "broker"))
            let elsewhere = try await OP.get(
                client,
                OP.authorizeURI([
                    ("response_type", "code"), ("client_id", "broker-account"),
                    ("redirect_uri", "https://evil.example/account"), ("scope", "openid"),
                ]), Jar())
            #expect(elsewhere.status == 400 && elsewhere.header("Location") == nil)
        }
    }

    @Test func everyFormNeedsItsCSRFTokenAndTheBrowserSessionAndBadInputChangesNothing() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let registered = try await client.register("ada@example.com", OP.password)
            let user = try #require(registered["user_id"]?.stringValue.flatMap(UserID.init))
            let jar = Jar()
            let page = try await Self.signedIn(broker, client, jar, email: "ada@example.com")
            let cli = try #require(try await broker.store.sessions(user: user).first)

            let forged = try await OP.post(
                client, "/auth/account/page/session", [("id", cli.id), ("csrf", "forged")], jar)
            #expect(forged.status == 403 && Self.html(forged).contains("This page has expired"))
            let none = try await OP.post(client, "/auth/account/page/delete", [("confirm", "DELETE")], jar)
            #expect(none.status == 403)
            // A CSRF token that matches its cookie but no browser session: the sign-in page, nothing done.
            let stranger = Jar()
            stranger.cookies["broker_csrf"] = jar.cookies["broker_csrf"]
            let signedOut = try await Self.act(client, stranger, page: page, "session", [("id", cli.id)])
            #expect(signedOut.status == 200 && Self.html(signedOut).contains("Your sign-in ended; sign in again."))
            #expect(try await broker.store.session(id: cli.id)?.revokedAt == nil, "nothing was changed")
            #expect(try await broker.store.user(id: user) != nil)

            // Unknown ids, providers and actions: said so, nothing changed.
            let unknown = try await Self.act(client, jar, page: page, "session", [("id", "no-such-session")])
            #expect(unknown.status == 303 && unknown.header("Location") == "/account?said=not-found")
            let provider = try await Self.act(client, jar, page: page, "unlink", [("provider", "nonsense")])
            #expect(provider.header("Location") == "/account?said=not-found")
            let action = try await Self.act(client, jar, page: page, "nonsense")
            #expect(action.status == 404)
            let long = try await Self.act(
                client, jar, page: page, "session", [("id", String(repeating: "x", count: 9000))])
            #expect(long.header("Location") == "/account?said=not-found")
            #expect(try await broker.store.session(id: cli.id)?.revokedAt == nil)
        }
    }

    @Test func sessionsAndTheAppsAllowedAreEndedFromThePageAndOnlyTheUsersOwn() async throws {
        let broker = try await InProcessBroker(config: #"{"server": {"audit_store": true}}"#)
        try await OP.register(broker)
        try await broker.test { client in
            let registered = try await client.register("ada@example.com", OP.password)
            let user = try #require(registered["user_id"]?.stringValue.flatMap(UserID.init))
            let other = try await client.register("bob@example.com", OP.password)
            let otherUser = try #require(other["user_id"]?.stringValue.flatMap(UserID.init))
            let theirs = try #require(try await broker.store.sessions(user: otherUser).first)

            // Ada allows the app `web` (consent) and it signs her in: its session is listed with its scopes.
            let jar = Jar()
            let appPage = try await OP.get(client, OP.authorizeURI(OP.webRequest()), jar)
            let consent = try await OP.passwordSignIn(client, page: appPage, jar, email: "ada@example.com")
            let back = try await OP.allow(client, consent: consent, jar)
            let destination = try #require(OP.destination(back))
            let code = try #require(InProcessBrowserFlowTests.query(destination)["code"])
            #expect(try await OP.redeem(client, code: code).status == 200)
            let appSession = try #require(try await broker.store.sessions(user: user).first { $0.clientID == "web" })

            var page = try await OP.get(client, "/account", jar)
            let text = Self.html(page)
            #expect(text.contains("<h2>Apps you allowed</h2>") && text.contains("<strong>web</strong>"))
            #expect(text.contains("See your email address") && text.contains("1 session"))

            let revoked = try await Self.act(client, jar, page: page, "app", [("client_id", "web")])
            #expect(revoked.header("Location") == "/account?said=app-revoked")
            #expect(try await broker.store.consent(user: user, clientID: "web") == nil, "the next sign-in asks again")
            #expect(try await broker.store.session(id: appSession.id)?.revokedAt != nil)
            page = try await OP.get(client, "/account?said=app-revoked", jar)
            #expect(!Self.html(page).contains("<strong>web</strong>"))
            #expect(Self.html(page).contains("The app no longer has your permission"))

            // Bob's session is not Ada's to end.
            let notHers = try await Self.act(client, jar, page: page, "session", [("id", theirs.id)])
            #expect(notHers.header("Location") == "/account?said=not-found")
            #expect(try await broker.store.session(id: theirs.id)?.revokedAt == nil)
            let cli = try #require(try await broker.store.sessions(user: user).first { $0.clientID == "broker-cli" })
            let ended = try await Self.act(client, jar, page: page, "session", [("id", cli.id)])
            #expect(ended.header("Location") == "/account?said=session-ended")
            #expect(try await broker.store.session(id: cli.id)?.revokedAt != nil)
            await broker.service.context.audit.flush()
            let events = try await broker.store.auditEvents(user: user, since: nil, limit: 100).map(\.event)
            #expect(events.contains("app_consent_revoked") && events.contains("session_revoked"), "\(events)")

            // Signing this browser out clears its cookie, and the page asks to sign in again.
            page = try await OP.get(client, "/account", jar)
            let out = try await Self.act(client, jar, page: page, "sign-out")
            #expect(out.header("Location") == "/account?said=signed-out" && jar.cookies["broker_session"] == nil)
            #expect(try await broker.store.browserSessions(user: user).allSatisfy { $0.revokedAt != nil })
            #expect(Self.html(try await OP.get(client, "/account", jar)).contains("Sign in to continue"))
        }
    }

    @Test func aSecondFactorIsAddedOnThePageAndRemovedOnlyAfterASignInWithBoth() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let registered = try await client.register("ada@example.com", OP.password)
            let user = try #require(registered["user_id"]?.stringValue.flatMap(UserID.init))
            let jar = Jar()
            var page = try await Self.signedIn(broker, client, jar, email: "ada@example.com")

            // Added: the QR code (an SVG), the key as text, and the first code confirms it.
            let started = try await Self.act(client, jar, page: page, "mfa-add")
            #expect(started.status == 200, "\(Self.html(started))")
            let enrolment = Self.html(started)
            #expect(enrolment.contains("<svg") && enrolment.contains("otpauth://totp/"))
            let uri = try #require(enrolment.range(of: "href=\"otpauth://").map { enrolment[$0.upperBound...] })
            let secret = try #require(
                uri.range(of: "secret=").map { String(uri[$0.upperBound...].prefix { $0 != "&" }) })
            let wrong = try await OP.post(
                client, "/auth/account/page/mfa-confirm",
                [
                    ("enrolment", try #require(OP.hidden(started, "enrolment"))),
                    ("csrf", try #require(OP.hidden(started, "csrf"))), ("code", "000000"),
                ], jar)
            #expect(wrong.status == 400 && Self.html(wrong).contains("the code does not match"))
            #expect(Self.html(wrong).contains(secret.prefix(4)), "the same key shown again")
            #expect(try await broker.store.totpFactor(user: user) == nil)
            let confirmed = try await OP.post(
                client, "/auth/account/page/mfa-confirm",
                [
                    ("enrolment", try #require(OP.hidden(wrong, "enrolment"))),
                    ("csrf", try #require(OP.hidden(wrong, "csrf"))), ("code", try Self.code(secret, broker)),
                ], jar)
            #expect(confirmed.status == 200 && Self.html(confirmed).contains("Your recovery codes"))
            #expect(Self.html(confirmed).components(separatedBy: "<li class=\"code\">").count == 11, "ten codes, once")
            #expect(try await broker.store.totpFactor(user: user) != nil)

            // This browser signed in with the password alone: removing the factor asks for both first.
            page = try await OP.get(client, "/account", jar)
            #expect(Self.html(page).contains("10 recovery codes left"))
            broker.clock.advance(by: 30)
            let asked = try await Self.act(
                client, jar, page: page, "mfa-remove", [("code", try Self.code(secret, broker))])
            #expect(asked.status == 200 && Self.html(asked).contains("needs a sign-in with both factors"))
            #expect(try await broker.store.totpFactor(user: user) != nil, "nothing removed")
            let again = try await OP.passwordSignIn(client, page: asked, jar, email: "ada@example.com")
            let done = try await OP.post(
                client, "/auth/authorize/mfa",
                [
                    ("request", try #require(OP.hidden(again, "request"))),
                    ("ticket", try #require(OP.hidden(again, "ticket"))),
                    ("csrf", try #require(OP.hidden(again, "csrf"))), ("otp", try Self.code(secret, broker)),
                ], jar)
            #expect(done.header("Location") == "/account?said=signed-in-again", "\(Self.html(done))")
            page = try await OP.get(client, "/account?said=signed-in-again", jar)
            #expect(Self.html(page).contains("with your password and a code"))

            let mistyped = try await Self.act(client, jar, page: page, "mfa-remove", [("code", "123456")])
            #expect(mistyped.header("Location") == "/account?said=wrong-code")
            #expect(try await broker.store.totpFactor(user: user) != nil)
            broker.clock.advance(by: 30)
            let renewed = try await Self.act(
                client, jar, page: page, "recovery-codes", [("code", try Self.code(secret, broker))])
            #expect(Self.html(renewed).contains("Your new recovery codes"))
            broker.clock.advance(by: 30)
            let removed = try await Self.act(
                client, jar, page: page, "mfa-remove", [("code", try Self.code(secret, broker))])
            #expect(removed.header("Location") == "/account?said=mfa-removed")
            #expect(try await broker.store.totpFactor(user: user) == nil)

            // Ten minutes on, a change asks for a new sign-in (one factor is all the account has now).
            broker.clock.advance(by: 601)
            let stale = try await Self.act(client, jar, page: page, "mfa-add")
            #expect(Self.html(stale).contains("needs a recent sign-in"))
            #expect(!Self.html(stale).contains("<svg"))
        }
    }

    /// Linking from the page: off to the provider, bound to this browser (a callback elsewhere links nothing),
    /// attached on the way back, then unlinked again; a provider account that is someone else's is refused.
    @Test func aProviderIsLinkedFromThePageInThisBrowserOnlyAndUnlinkedAgain() async throws {
        let broker = try await InProcessBroker(config: InProcessBrowserFlowTests.config)
        let google = try InProcessBrowserFlowTests.ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        try await broker.test { client in
            let registered = try await client.register("ada@example.com", OP.password)
            let user = try #require(registered["user_id"]?.stringValue.flatMap(UserID.init))
            let jar = Jar()
            let page = try await Self.signedIn(broker, client, jar, email: "ada@example.com")
            #expect(Self.html(page).contains("Google: not linked"))

            func startLink() async throws -> (state: String, nonce: String) {
                let current = try await OP.get(client, "/account", jar)
                let onward = try await Self.act(client, jar, page: current, "link", [("provider", "google")])
                #expect(onward.status == 200, "\(Self.html(onward))")
                let location = try #require(OP.destination(onward))
                #expect(location.hasPrefix(InProcessBrowserFlowTests.issuer + "/auth?"))
                let fields = InProcessBrowserFlowTests.query(location)
                return (try #require(fields["state"]), try #require(fields["nonce"]))
            }
            func callback(_ state: String, in browser: Jar) async throws -> Reply {
                try await OP.get(
                    client,
                    "/auth/google/callback?" + FormEncoding.encode([("state", state), ("code", "provider-code")]),
                    browser)
            }

            // The provider's answer in another browser (a link sent to someone): nothing is linked.
            var (state, nonce) = try await startLink()
            let elsewhere = try await callback(state, in: Jar())
            #expect(elsewhere.header("Location") != "/account?said=linked")
            #expect(try await broker.store.identities(user: user).isEmpty)

            (state, nonce) = try await startLink()
            google.answerTokens(subject: "g-ada", nonce: nonce)
            let linked = try await callback(state, in: jar)
            #expect(linked.header("Location") == "/account?said=linked", "\(Self.html(linked))")
            #expect(try await broker.store.identities(user: user).map(\.identity.subject) == ["g-ada"])
            let listed = try await OP.get(client, "/account?said=linked", jar)
            #expect(
                Self.html(listed).contains("<strong>Google</strong>")
                    || Self.html(listed).contains("<strong>google</strong>"))

            // Someone else's Google account is theirs.
            let bob = try await client.register("bob@example.com", OP.password)
            let bobID = try #require(bob["user_id"]?.stringValue.flatMap(UserID.init))
            let googleID = try #require(ProviderID(rawValue: "google"))
            _ = try await broker.store.linkIdentity(
                IdentityRecord(provider: googleID, subject: "g-bob", email: nil, name: nil), to: bobID,
                now: broker.clock.seconds())
            let unlinked = try await Self.act(client, jar, page: listed, "unlink", [("provider", "google")])
            #expect(unlinked.header("Location") == "/account?said=unlinked")
            #expect(try await broker.store.identities(user: user).isEmpty)
            (state, nonce) = try await startLink()
            google.answerTokens(subject: "g-bob", nonce: nonce)
            let owned = try await callback(state, in: jar)
            #expect(owned.header("Location") == "/account?said=link-owned", "\(Self.html(owned))")
            #expect(try await broker.store.identities(user: user).isEmpty)
            #expect(try await broker.store.identityOwner(provider: googleID, subject: "g-bob") == bobID)
        }
    }

    /// A provider's user signs in to the page with the provider, adds an email and password there (a weak one is
    /// refused on the page, nothing added); ten minutes on, deletion asks for a new sign-in first.
    @Test func aProvidersUserAddsAPasswordOnThePageAndDeletionAsksForARecentSignIn() async throws {
        let broker = try await InProcessBroker(config: InProcessBrowserFlowTests.config)
        let google = try InProcessBrowserFlowTests.ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        try await broker.test { client in
            let jar = Jar()
            let signInPage = try await OP.get(client, "/account", jar)
            let onward = try await OP.post(
                client, "/auth/authorize/provider",
                [
                    ("request", try #require(OP.hidden(signInPage, "request"))),
                    ("csrf", try #require(OP.hidden(signInPage, "csrf"))), ("provider", "google"),
                ], jar)
            let location = try #require(OP.destination(onward))
            let fields = InProcessBrowserFlowTests.query(location)
            google.answerTokens(subject: "g-grace", nonce: try #require(fields["nonce"]))
            let back = try await OP.get(
                client,
                "/auth/google/callback?"
                    + FormEncoding.encode([("state", try #require(fields["state"])), ("code", "provider-code")]), jar)
            #expect(back.status == 303 && back.header("Location") == "/account", "\(Self.html(back))")
            var page = try await OP.get(client, "/account", jar)
            #expect(Self.html(page).contains("with Google") || Self.html(page).contains("with google"))
            #expect(Self.html(page).contains("action=\"/auth/account/page/link-password\""))
            let user = try #require(try await broker.store.browserSessions(user: nil).first?.userID)

            let weak = try await Self.act(
                client, jar, page: page, "link-password", [("email", "grace@example.com"), ("password", "short")])
            #expect(weak.status == 400 && Self.html(weak).contains("class=\"problem\""), "\(Self.html(weak))")
            #expect(try await broker.store.passwordAccount(user: user) == nil)
            let added = try await Self.act(
                client, jar, page: weak, "link-password",
                [("email", "grace@example.com"), ("password", OP.password)])
            #expect(added.header("Location") == "/account?said=password-added")
            #expect(try await broker.store.passwordAccount(user: user)?.email == "grace@example.com")

            // Deleting: the password now, since there is one; after ten minutes, a new sign-in first.
            page = try await OP.get(client, "/account", jar)
            broker.clock.advance(by: 601)
            let stale = try await Self.act(
                client, jar, page: page, "delete", [("confirm", "DELETE"), ("password", OP.password)])
            #expect(Self.html(stale).contains("needs a recent sign-in"))
            #expect(try await broker.store.user(id: user) != nil)
        }
    }

    @Test func theLastWayInStaysAndDeletionTakesTheWordAndThePassword() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let registered = try await client.register("ada@example.com", OP.password)
            let user = try #require(registered["user_id"]?.stringValue.flatMap(UserID.init))
            let jar = Jar()
            let page = try await Self.signedIn(broker, client, jar, email: "ada@example.com")

            let last = try await Self.act(client, jar, page: page, "unlink", [("provider", "custom")])
            #expect(last.header("Location") == "/account?said=last-way-in")
            #expect(try await broker.store.passwordAccount(user: user) != nil)

            let exported = try await Self.act(client, jar, page: page, "export")
            #expect(exported.status == 200)
            #expect(exported.header("Content-Disposition") == "attachment; filename=\"broker-account.json\"")
            #expect(exported["user"]?["user_id"]?.stringValue == user.description)

            let unconfirmed = try await Self.act(client, jar, page: page, "delete", [("password", OP.password)])
            #expect(unconfirmed.header("Location") == "/account?said=not-confirmed")
            let wrong = try await Self.act(
                client, jar, page: page, "delete", [("confirm", "DELETE"), ("password", "not the password at all")])
            #expect(wrong.header("Location") == "/account?said=wrong-password")
            #expect(try await broker.store.user(id: user) != nil)
            let deleted = try await Self.act(
                client, jar, page: page, "delete", [("confirm", "DELETE"), ("password", OP.password)])
            #expect(deleted.status == 200 && Self.html(deleted).contains("Your account is deleted"))
            #expect(try await broker.store.user(id: user) == nil)
            #expect(jar.cookies["broker_session"] == nil)
        }
    }
}
