import BrokerClient
import BrokerCore
import BrokerCrypto
import BrokerQR
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// The device authorization grant (RFC 8628) in process, on the manual clock: the protocol's answers and
/// edge cases, the pages' protections, and the custom and provider ways to approve.
@Suite("device flow in process")
struct InProcessDeviceTests {
    typealias Flow = InProcessBrowserFlowTests
    typealias Reply = InProcessBroker.Client.Reply
    static let password = "correct horse battery staple"

    static func authorize(
        _ client: InProcessBroker.Client, _ fields: [(String, String)] = [("client_id", "broker-cli")]
    )
        async throws -> Reply
    {
        try await client.form("/auth/device", fields)
    }

    static func poll(_ client: InProcessBroker.Client, _ deviceCode: String, clientID: String = "broker-cli")
        async throws -> Reply
    {
        try await client.form(
            "/auth/token",
            [
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", deviceCode),
                ("client_id", clientID),
            ])
    }

    static func cookie(_ reply: Reply) -> String? { PasswordRecoveryTests.cookie(reply) }
    static func csrf(_ reply: Reply) -> String? { PasswordRecoveryTests.csrf(reply) }

    /// The `name=value` of the cookie `name` the reply sets (of several `Set-Cookie` fields).
    static func setCookie(_ reply: Reply, _ name: String) -> String? {
        reply.headers[values: .setCookie].lazy.compactMap { field in
            field.split(separator: ";").first.map(String.init)
        }.first { $0.hasPrefix(name + "=") }
    }

    /// The provider step of a device sign-in from the onward page of `/auth/device/signin`: the provider URL's
    /// query and the cookie binding the step to this browser (RT2-4).
    static func providerStep(_ onward: Reply, provider: String = "google") throws -> (
        query: [String: String], binding: String
    ) {
        let html = String(decoding: onward.body, as: UTF8.self)
        let target = try #require(
            html.range(of: "url=").map { String(html[$0.upperBound...].prefix { $0 != "\"" }) })
        let binding = try #require(setCookie(onward, "broker_device_" + provider), "the binding cookie")
        return (Flow.query(target.replacingOccurrences(of: "&amp;", with: "&")), binding)
    }

    static func hidden(_ reply: Reply, _ name: String) -> String? {
        let html = String(decoding: reply.body, as: UTF8.self)
        guard let range = html.range(of: #"name="\#(name)" value=""#) else { return nil }
        return String(html[range.upperBound...].prefix { $0 != "\"" })
    }

    static func post(_ client: InProcessBroker.Client, _ path: String, _ fields: [(String, String)], cookie: String?)
        async throws -> Reply
    {
        var headers: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
        if let cookie { headers[.cookie] = cookie }
        return try await client.send(.post, path, headers: headers, body: Array(FormEncoding.encode(fields).utf8))
    }

    /// The custom way through the pages up to the decision; returns the decision's answer.
    static func approveWithPassword(
        _ client: InProcessBroker.Client, userCode: String, email: String, decision: String = "allow"
    ) async throws -> Reply {
        let page = try await client.get(
            "/device?user_code=" + userCode.lowercased().replacingOccurrences(of: "-", with: ""))
        #expect(page.status == 200)
        let cookie = try #require(Self.cookie(page))
        let csrf = try #require(Self.csrf(page))
        let code = try #require(Self.hidden(page, "user_code"))
        let confirm = try await post(
            client, "/auth/device/password",
            [("user_code", code), ("email", email), ("password", Self.password), ("csrf", csrf)], cookie: cookie)
        #expect(confirm.status == 200, "\(String(decoding: confirm.body, as: UTF8.self))")
        let approval = try #require(Self.hidden(confirm, "approval"))
        let confirmCSRF = try #require(Self.csrf(confirm))
        return try await post(
            client, "/auth/device/decision", [("approval", approval), ("decision", decision), ("csrf", confirmCSRF)],
            cookie: Self.cookie(confirm))
    }

    @Test func theGrantAnswersPendingSlowDownThenTheSessionOnce() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            #expect(try await client.register("ada@example.com", Self.password).status == 201)
            let started = try await Self.authorize(client)
            #expect(started.status == 200 && started.header("Cache-Control") == "no-store")
            let deviceCode = try #require(started["device_code"]?.stringValue)
            let userCode = try #require(started["user_code"]?.stringValue)
            #expect(deviceCode.utf8.count == 43)
            #expect(
                userCode.range(of: "^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$", options: .regularExpression)
                    != nil)
            #expect(started["verification_uri"]?.stringValue == "http://broker.test/device")
            #expect(
                started["verification_uri_complete"]?.stringValue == "http://broker.test/device?user_code=\(userCode)")
            #expect(started["expires_in"]?.intValue == 600 && started["interval"]?.intValue == 5)
            #expect(
                try await client.get("/.well-known/openid-configuration")["device_authorization_endpoint"]
                    == "http://broker.test/auth/device")

            #expect(try await Self.poll(client, deviceCode).error == "authorization_pending")
            let tooFast = try await Self.poll(client, deviceCode)
            #expect(tooFast.status == 400 && tooFast.error == "slow_down")
            #expect(tooFast["error_description"]?.stringValue?.contains("10 seconds") == true, "5 s more")
            broker.clock.advance(by: 10)
            #expect(try await Self.poll(client, deviceCode).error == "authorization_pending")
            #expect(try await Self.poll(client, deviceCode, clientID: "someone-else").error == "invalid_client")

            let decided = try await Self.approveWithPassword(client, userCode: userCode, email: "ada@example.com")
            #expect(decided.status == 200)
            #expect(String(decoding: decided.body, as: UTF8.self).contains("You are signed in on the device"))
            broker.clock.advance(by: 10)
            // Two processes polling the one approved code: one session between them.
            async let first = Self.poll(client, deviceCode)
            async let second = Self.poll(client, deviceCode)
            let answers = try await [first, second]
            let sessions = answers.filter { $0.status == 200 }
            #expect(sessions.count == 1)
            #expect(answers.contains { $0.error == "invalid_grant" })
            let access = try #require(sessions.first?["access_token"]?.stringValue)
            #expect(try await client.get("/auth/me", bearer: access)["email"] == "ada@example.com")
            broker.clock.advance(by: 10)
            #expect(try await Self.poll(client, deviceCode).error == "invalid_grant", "a reused device code")
        }
    }

    @Test func denialExpiryAndBadRequests() async throws {
        let broker = try await InProcessBroker(
            config: #"{"server": {"device_code_ttl": 120, "device_poll_interval": 2}}"#)
        try await broker.test { client in
            #expect(try await client.register("ada@example.com", Self.password).status == 201)
            let denied = try await Self.authorize(client)
            #expect(denied["expires_in"]?.intValue == 120 && denied["interval"]?.intValue == 2)
            let decision = try await Self.approveWithPassword(
                client, userCode: try #require(denied["user_code"]?.stringValue), email: "ada@example.com",
                decision: "deny")
            #expect(String(decoding: decision.body, as: UTF8.self).contains("Sign-in denied"))
            #expect(
                try await Self.poll(client, try #require(denied["device_code"]?.stringValue)).error == "access_denied")

            let late = try await Self.authorize(client)
            broker.clock.advance(by: 121)
            let expired = try await Self.poll(client, try #require(late["device_code"]?.stringValue))
            #expect(expired.status == 400 && expired.error == "expired_token")
            let gone = try await client.get("/device?user_code=" + (late["user_code"]?.stringValue ?? ""))
            #expect(gone.status == 400 && String(decoding: gone.body, as: UTF8.self).contains("not waiting"))

            #expect(try await Self.authorize(client, [("client_id", "other")]).error == "invalid_client")
            #expect(try await Self.authorize(client, []).error == "invalid_client")
            #expect(
                try await Self.authorize(client, [("client_id", "broker-cli"), ("provider", "myspace")]).error
                    == "invalid_request")
            #expect(try await Self.poll(client, "not-a-device-code").error == "invalid_grant")
            #expect(try await Self.poll(client, String(repeating: "A", count: 43)).error == "invalid_grant")
            let missing = try await client.form(
                "/auth/token",
                [("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("client_id", "broker-cli")])
            #expect(missing.status == 400 && missing.error == "invalid_request")
        }
    }

    @Test func everyFormNeedsItsCSRFTokenAndNoPageCanBeFramed() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            #expect(try await client.register("ada@example.com", Self.password).status == 201)
            let started = try await Self.authorize(client)
            let userCode = try #require(started["user_code"]?.stringValue)
            let entry = try await client.get("/device")
            let page = try await client.get("/device?user_code=\(userCode)")
            for reply in [entry, page] {
                #expect(reply.header("X-Frame-Options") == "DENY")
                #expect(reply.header("Content-Security-Policy")?.contains("frame-ancestors 'none'") == true)
                #expect(reply.header("Cache-Control") == "no-store")
                // No script but the broker's own passkey script (no inline code: the page's CSP allows none).
                let body = String(decoding: reply.body, as: UTF8.self)
                #expect(
                    !body.replacingOccurrences(of: #"<script src="/auth/passkey.js" defer></script>"#, with: "")
                        .contains("<script"))
            }
            let html = String(decoding: page.body, as: UTF8.self)
            #expect(html.contains("broker CLI") && html.contains(userCode))
            let code = try #require(Self.hidden(page, "user_code"))
            let csrf = try #require(Self.csrf(page))
            // A cross-site post: no cookie, or a token from another page.
            for (cookie, token) in [(nil, csrf), (Self.cookie(page), "forged"), (Self.cookie(page), "")] {
                let forged = try await Self.post(
                    client, "/auth/device/password",
                    [("user_code", code), ("email", "ada@example.com"), ("password", Self.password), ("csrf", token)],
                    cookie: cookie)
                #expect(forged.status == 403)
            }
            let forgedDecision = try await Self.post(
                client, "/auth/device/decision", [("approval", "x"), ("decision", "allow"), ("csrf", "x")], cookie: nil)
            #expect(forgedDecision.status == 403)
            let badApproval = try await Self.post(
                client, "/auth/device/decision", [("approval", "made-up"), ("decision", "allow"), ("csrf", csrf)],
                cookie: Self.cookie(page))
            #expect(badApproval.status == 400)
            let wrong = try await Self.post(
                client, "/auth/device/password",
                [("user_code", code), ("email", "ada@example.com"), ("password", "not it at all"), ("csrf", csrf)],
                cookie: Self.cookie(page))
            #expect(
                wrong.status == 401 && String(decoding: wrong.body, as: UTF8.self).contains("Wrong email or password"))
            #expect(
                try await Self.poll(client, try #require(started["device_code"]?.stringValue)).error
                    == "authorization_pending", "nothing approved")
        }
    }

    @Test func wrongUserCodesFromOneAddressAreThrottled() async throws {
        let broker = try await InProcessBroker()
        try await broker.live { client, _ in
            for _ in 0..<10 {
                #expect(try await client.get("/device?user_code=BCDF-GHJK").status == 400)
            }
            let limited = try await client.get("/device?user_code=BCDF-GHJK")
            #expect(limited.status == 429 && limited.header("Retry-After") != nil)
            let started = try await Self.authorize(client)
            let right = try await client.get("/device?user_code=" + (started["user_code"]?.stringValue ?? ""))
            #expect(right.status == 429, "even a right code waits: guessing stays slow")
            broker.clock.advance(by: 61)
            #expect(
                try await client.get("/device?user_code=" + (started["user_code"]?.stringValue ?? "")).status == 200)
        }
    }

    @Test func aDeviceLinkOfSomeoneElsesAccountIsRefusedAndTheCLIStops() async throws {
        let broker = try await InProcessBroker(config: Flow.config)
        let google = try Flow.ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        try await broker.test { client in
            // google:1045 is a user of its own already.
            guard
                case .user = try await broker.store.signIn(
                    IdentityRecord(provider: "google", subject: "1045", email: nil, name: nil),
                    now: broker.clock.seconds())
            else { throw ServerTestError("no user") }
            let ada = try await client.register("ada@example.com", Self.password)
            let token = try await client.accountToken(ada)
            let unauthenticated = try await Self.authorize(
                client, [("client_id", "broker-cli"), ("provider", "google"), ("purpose", "link")])
            #expect(unauthenticated.status == 401)
            let noProvider = try await client.send(
                .post, "/auth/device",
                headers: [.contentType: "application/x-www-form-urlencoded", .authorization: "Bearer \(token)"],
                body: Array("client_id=broker-cli&purpose=link".utf8))
            #expect(noProvider.status == 400)
            let started = try await client.send(
                .post, "/auth/device",
                headers: [.contentType: "application/x-www-form-urlencoded", .authorization: "Bearer \(token)"],
                body: Array("client_id=broker-cli&purpose=link&provider=google".utf8))
            #expect(started.status == 200)
            let page = try await client.get("/device?user_code=" + (started["user_code"]?.stringValue ?? ""))
            let html = String(decoding: page.body, as: UTF8.self)
            #expect(html.contains("Link an account") && !html.contains("/auth/device/password"), "no password form")
            let onward = try await Self.post(
                client, "/auth/device/signin",
                [
                    ("user_code", try #require(Self.hidden(page, "user_code"))), ("provider", "google"),
                    ("csrf", try #require(Self.csrf(page))),
                ], cookie: Self.cookie(page))
            let (query, binding) = try Self.providerStep(onward)
            google.answerTokens(subject: "1045", nonce: try #require(query["nonce"]))
            let callback = try await client.send(
                .get,
                "/auth/google/callback?"
                    + FormEncoding.encode([("state", try #require(query["state"])), ("code", "provider-code")]),
                headers: [.cookie: binding])
            #expect(callback.status == 409)
            #expect(String(decoding: callback.body, as: UTF8.self).contains("already signs in as another broker user"))
            #expect(
                try await broker.store.identityOwner(provider: "google", subject: "1045")?.description == "google:1045")
        }
    }

    /// A provider that cannot be reached (its discovery refused): the choice page again, saying so, with the
    /// other ways in — not an error body for a browser.
    @Test func anUnreachableProviderShowsTheChoiceAgain() async throws {
        let broker = try await InProcessBroker(config: Flow.config)
        try await broker.test { client in
            let started = try await Self.authorize(client, [("client_id", "broker-cli")])
            let page = try await client.get("/device?user_code=" + (started["user_code"]?.stringValue ?? ""))
            let answer = try await Self.post(
                client, "/auth/device/signin",
                [
                    ("user_code", try #require(Self.hidden(page, "user_code"))), ("provider", "google"),
                    ("csrf", try #require(Self.csrf(page))),
                ], cookie: Self.cookie(page))
            #expect(answer.status == 503)
            let html = String(decoding: answer.body, as: UTF8.self)
            #expect(html.contains("Google cannot be reached right now"), "\(html)")
            #expect(html.contains("action=\"/auth/device/password\""), "the other ways in are offered")
            #expect(answer.headers[.contentType]?.hasPrefix("text/html") == true)
        }
    }

    @Test func aProviderSignInEndsInTheConfirmationPage() async throws {
        let broker = try await InProcessBroker(config: Flow.config)
        let google = try Flow.ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        try await broker.test { client in
            let started = try await Self.authorize(client, [("client_id", "broker-cli"), ("provider", "google")])
            let page = try await client.get("/device?user_code=" + (started["user_code"]?.stringValue ?? ""))
            #expect(String(decoding: page.body, as: UTF8.self).contains("Sign in with Google"))
            let onward = try await Self.post(
                client, "/auth/device/signin",
                [
                    ("user_code", try #require(Self.hidden(page, "user_code"))), ("provider", "google"),
                    ("csrf", try #require(Self.csrf(page))),
                ], cookie: Self.cookie(page))
            #expect(onward.status == 200)
            let html = String(decoding: onward.body, as: UTF8.self)
            let target = try #require(
                html.range(of: "url=").map { String(html[$0.upperBound...].prefix { $0 != "\"" }) })
            let location = target.replacingOccurrences(of: "&amp;", with: "&")
            #expect(location.hasPrefix(Flow.issuer + "/auth?"))
            let (query, binding) = try Self.providerStep(onward)
            #expect(query == Flow.query(location))
            #expect(onward.headers[values: .setCookie].contains { $0.contains("Path=/auth/google/callback") })
            google.answerTokens(subject: "1045", nonce: try #require(query["nonce"]))
            let callback = try await client.send(
                .get,
                "/auth/google/callback?"
                    + FormEncoding.encode([("state", try #require(query["state"])), ("code", "provider-code")]),
                headers: [.cookie: binding])
            #expect(callback.status == 200)
            #expect(
                callback.headers[values: .setCookie].contains { $0.hasPrefix("broker_device_google=;") },
                "the binding is dropped once used")
            let confirm = String(decoding: callback.body, as: UTF8.self)
            #expect(confirm.contains("Allow this device?") && confirm.contains("google:1045"))
            let decided = try await Self.post(
                client, "/auth/device/decision",
                [
                    ("approval", try #require(Self.hidden(callback, "approval"))), ("decision", "allow"),
                    ("csrf", try #require(Self.csrf(callback))),
                ], cookie: Self.cookie(callback))
            #expect(decided.status == 200)
            broker.clock.advance(by: 5)
            let session = try await Self.poll(client, try #require(started["device_code"]?.stringValue))
            #expect(session.status == 200 && session["user_id"]?.stringValue == "google:1045")
        }
    }
}

extension InProcessDeviceTests {
    @Test func deviceAuthorizationRequestsAreLimitedPerAddress() async throws {
        let broker = try await InProcessBroker()
        try await broker.live { client, _ in
            for _ in 0..<30 {
                #expect(try await Self.authorize(client).status == 200)
            }
            let limited = try await Self.authorize(client)
            #expect(limited.status == 429 && limited.error == "too_many_requests")
            #expect(Int(limited.header("Retry-After") ?? "") ?? 0 > 0)
            broker.clock.advance(by: 21)
            #expect(try await Self.authorize(client).status == 200, "one more every 20 s")
        }
    }
}

/// The QR code `broker login --device` draws: libqrencode's modules, drawn two rows to a character.
@Suite("the device flow's QR code")
struct QRTextTests {
    @Test func aURLBecomesAQRCodeWithItsFinderPatternsAndQuietZone() throws {
        let text = "http://127.0.0.1:8787/device?user_code=BCDF-GHJK"
        let modules = try #require(QRCode.modules(text))
        let width = modules.count
        #expect(width >= 21 && (width - 21) % 4 == 0, "a QR version's size: 21 + 4(v-1)")
        #expect(modules.allSatisfy { $0.count == width })
        // The three finder patterns: a dark 7×7 ring around a light ring around a dark 3×3 centre.
        for (top, left) in [(0, 0), (0, width - 7), (width - 7, 0)] {
            for row in 0..<7 {
                for column in 0..<7 {
                    let ring = max(abs(row - 3), abs(column - 3))
                    #expect(modules[top + row][left + column] == (ring != 2), "finder at \(top),\(left)")
                }
            }
        }
        // The account page's SVG draws exactly these modules: its path's runs, read back, are the grid.
        let svg = try #require(QRCode.svg(text))
        let path = try #require(svg.range(of: "d=\"").map { svg[$0.upperBound...].prefix { $0 != "\"" } })
        var drawn = Array(repeating: Array(repeating: false, count: width), count: width)
        for run in path.split(separator: "M") {
            let numbers = run.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
            let (x, y, length) = (numbers[0] - 4, numbers[1] - 4, numbers[2])
            for column in x..<(x + length) { drawn[y][column] = true }
        }
        #expect(drawn == modules)
        #expect(svg.contains("viewBox=\"0 0 \(width + 8) \(width + 8)\""), "the quiet zone")
        let lines = try #require(QRText.render(text))
        #expect(lines.count == (width + 8 + 1) / 2)
        #expect(lines.allSatisfy { $0.count == width + 8 })
        #expect(lines.allSatisfy { $0.allSatisfy { "█▀▄ ".contains($0) } })
        #expect(lines[0] == String(repeating: "█", count: width + 8), "the quiet zone is drawn light")
        #expect(QRText.render(String(repeating: "x", count: 8000)) == nil, "too long for any QR version")
    }
}
