import BrokerCore
import BrokerServer
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// Password reset and change through the broker's endpoints, with the mail going to a real SMTP server.
@Suite("password reset and change")
struct PasswordRecoveryTests {
    static let password = "correct horse battery staple"
    static let fresh = "a brand new passphrase 42"

    /// A broker (in process, manual clock) whose mail goes to `sink`.
    static func broker(_ sink: SMTPSink) async throws -> InProcessBroker {
        try await InProcessBroker(
            config: #"{"mail": {"url": "\#(sink.url)", "from": "Broker <broker@example.com>", "max_attempts": 2}}"#)
    }

    /// The token of the newest reset link mailed to `email`.
    static func mailedToken(_ sink: SMTPSink, to email: String) throws -> String? {
        try sink.mailedToken(to: email, subject: "Reset your password", path: "/auth/password/reset")
    }

    static func cookie(_ reply: InProcessBroker.Client.Reply) -> String? {
        reply.header("Set-Cookie")?.split(separator: ";").first.map(String.init)
    }

    static func csrf(_ reply: InProcessBroker.Client.Reply) -> String? {
        let html = String(decoding: reply.body, as: UTF8.self)
        guard let range = html.range(of: #"name="csrf" value=""#) else { return nil }
        return String(html[range.upperBound...].prefix { $0 != "\"" })
    }

    func submit(
        _ client: InProcessBroker.Client, token: String, csrf: String?, cookie: String?, password: String,
        again: String? = nil
    ) async throws -> InProcessBroker.Client.Reply {
        var headers: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
        if let cookie { headers[.cookie] = cookie }
        var fields = [("token", token), ("password", password), ("password_again", again ?? password)]
        if let csrf { fields.append(("csrf", csrf)) }
        return try await client.send(
            .post, "/auth/password/reset", headers: headers, body: Array(FormEncoding.encode(fields).utf8))
    }

    @Test func aMailedLinkSetsANewPasswordOnceAndEndsEverySession() async throws {
        let sink = try await SMTPSink.start()
        let broker = try await Self.broker(sink)
        try await broker.test { client in
            #expect(try await client.register("reset@example.com", Self.password).status == 201)
            let session = try await client.login("reset@example.com", Self.password)
            let refresh = try #require(session["refresh_token"]?.stringValue)

            let known = try await client.post("/auth/password/forgot", json: ["email": "Reset@Example.com"])
            let unknown = try await client.post("/auth/password/forgot", json: ["email": "nobody@example.com"])
            #expect(known.status == 202)
            #expect(unknown.status == known.status && unknown.body == known.body, "nothing tells the two apart")
            await broker.service.mailer?.flush()
            let resets = try sink.messages().filter { $0["subject"]?.stringValue == "Reset your password" }
            #expect(resets.count == 1, "mail only for the account that exists")
            let token = try #require(try Self.mailedToken(sink, to: "reset@example.com"))

            let page = try await client.get("/auth/password/reset?token=" + token)
            #expect(page.status == 200)
            #expect(page.header("Content-Type")?.hasPrefix("text/html") == true)
            #expect(page.header("Content-Security-Policy")?.contains("frame-ancestors 'none'") == true)
            #expect(page.header("X-Frame-Options") == "DENY")
            #expect(page.header("Referrer-Policy") == "no-referrer")
            #expect(page.header("Cache-Control") == "no-store")
            #expect(!String(decoding: page.body, as: UTF8.self).contains("<script"))
            let cookie = try #require(Self.cookie(page))
            let csrf = try #require(Self.csrf(page))
            #expect(page.header("Set-Cookie")?.contains("HttpOnly") == true)
            #expect(page.header("Set-Cookie")?.contains("SameSite=Strict") == true)

            // Refusals that keep the link alive.
            #expect(
                try await submit(client, token: token, csrf: nil, cookie: cookie, password: Self.fresh).status == 403)
            #expect(try await submit(client, token: token, csrf: csrf, cookie: nil, password: Self.fresh).status == 403)
            #expect(
                try await submit(client, token: token, csrf: "forged", cookie: cookie, password: Self.fresh).status
                    == 403)
            let mismatch = try await submit(
                client, token: token, csrf: csrf, cookie: cookie, password: Self.fresh, again: Self.fresh + "x")
            #expect(mismatch.status == 400)
            #expect(String(decoding: mismatch.body, as: UTF8.self).contains("not the same"))
            let weak = try await submit(client, token: token, csrf: csrf, cookie: cookie, password: "password")
            #expect(weak.status == 400)
            #expect(try await client.login("reset@example.com", Self.password).status == 200, "nothing changed yet")

            let done = try await submit(client, token: token, csrf: csrf, cookie: cookie, password: Self.fresh)
            #expect(done.status == 200, "\(String(decoding: done.body, as: UTF8.self))")
            #expect(String(decoding: done.body, as: UTF8.self).contains("Your password was changed"))
            #expect(try await client.login("reset@example.com", Self.password).status == 401)
            #expect(try await client.login("reset@example.com", Self.fresh).status == 200)
            #expect(try await client.refresh(refresh).status == 400, "the sessions from before the reset ended")

            let again = try await submit(client, token: token, csrf: csrf, cookie: cookie, password: Self.fresh + "!")
            #expect(again.status == 400, "a link works once")
            #expect(try await client.get("/auth/password/reset?token=" + token).status == 400)
            #expect(try await client.login("reset@example.com", Self.fresh).status == 200)

        }
    }

    @Test func aLinkLastsThirtyMinutesAndOnlyTheNewestWorks() async throws {
        let sink = try await SMTPSink.start()
        let broker = try await Self.broker(sink)
        try await broker.test { client in
            #expect(try await client.register("expiry@example.com", Self.password).status == 201)
            _ = try await client.post("/auth/password/forgot", json: ["email": "expiry@example.com"])
            await broker.service.mailer?.flush()
            let first = try #require(try Self.mailedToken(sink, to: "expiry@example.com"))
            _ = try await client.post("/auth/password/forgot", json: ["email": "expiry@example.com"])
            await broker.service.mailer?.flush()
            let second = try #require(try Self.mailedToken(sink, to: "expiry@example.com"))
            #expect(first != second)
            #expect(try await client.get("/auth/password/reset?token=" + first).status == 400, "replaced")
            #expect(try await client.get("/auth/password/reset?token=" + second).status == 200)
            broker.clock.advance(by: 1800)
            #expect(try await client.get("/auth/password/reset?token=" + second).status == 400, "expired")
            for bad in ["", "short", String(repeating: "A", count: 43), "../../etc/passwd"] {
                #expect(
                    try await client.get("/auth/password/reset?token=" + FormEncoding.percentEncode(bad)).status == 400)
            }
            // Three requests an hour per address, known or not alike; the fourth is refused.
            #expect(try await client.register("limit@example.com", Self.password).status == 201)
            for email in ["limit@example.com", "ghost@example.com"] {
                for _ in 0..<3 {
                    #expect(
                        try await client.post("/auth/password/forgot", json: ["email": .string(email)]).status == 202)
                }
                let refused = try await client.post("/auth/password/forgot", json: ["email": .string(email)])
                #expect(refused.status == 429, "\(email)")
                #expect(refused.header("Retry-After") != nil)
            }
        }
    }

    @Test func withoutMailTheForgotEndpointSaysSoAndWithTheServerDownItStillAnswers() async throws {
        let bare = try await InProcessBroker()
        try await bare.test { client in
            let reply = try await client.post("/auth/password/forgot", json: ["email": "a@example.com"])
            #expect(reply.status == 404)
            #expect(reply.json?["error_description"]?.stringValue?.contains("mail") == true)
        }
        let closed = try freeLoopbackPort()
        let config =
            #"{"mail": {"url": "smtp://127.0.0.1:"# + "\(closed)" + #"", "from": "b@example.com", "max_attempts": 2}}"#
        let down = try await InProcessBroker(config: config)
        try await down.test { (client: InProcessBroker.Client) async throws in
            #expect(try await client.register("down@example.com", Self.password).status == 201)
            #expect(try await client.post("/auth/password/forgot", json: ["email": "down@example.com"]).status == 202)
            await down.service.mailer?.flush()
            #expect(down.service.metrics.text().contains(#"broker_mail_total{kind="reset",outcome="failed"} 1"#))
        }
    }

    @Test func aSignedInPasswordChangeKeepsThisSessionAndEndsTheOthers() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let registered = try await client.register("change@example.com", Self.password)
            let apiToken = try #require(registered["access_token"]?.stringValue)
            // The change needs an account token (RT2-1); its grant rotates this session's refresh token.
            let grant = try await client.accountGrant(
                refreshToken: try #require(registered["refresh_token"]?.stringValue))
            let mine = try #require(grant["access_token"]?.stringValue)
            let myRefresh = try #require(grant["refresh_token"]?.stringValue)
            let other = try await client.login("change@example.com", Self.password)
            let otherRefresh = try #require(other["refresh_token"]?.stringValue)

            func change(_ current: String, _ next: String, bearer: String?) async throws -> InProcessBroker.Client.Reply
            {
                var headers: HTTPFields = [.contentType: "application/json"]
                if let bearer { headers[.authorization] = "Bearer \(bearer)" }
                let body: JSONValue = ["current_password": .string(current), "new_password": .string(next)]
                return try await client.send(
                    .post, "/auth/password/change", headers: headers, body: Array(body.serialized().utf8))
            }
            #expect(try await change(Self.password, Self.fresh, bearer: nil).status == 401)
            let byAPIToken = try await change(Self.password, Self.fresh, bearer: apiToken)
            #expect(byAPIToken.status == 401 && byAPIToken.error == "invalid_token", "an API token changes nothing")
            #expect(try await change("wrong password", Self.fresh, bearer: mine).status == 401)
            let weak = try await change(Self.password, "password", bearer: mine)
            #expect(weak.status == 400)
            #expect(try await client.refresh(otherRefresh).status == 200, "failed changes end nothing")
            let otherNow = try await client.login("change@example.com", Self.password)
            let otherRefreshNow = try #require(otherNow["refresh_token"]?.stringValue)

            let changed = try await change(Self.password, Self.fresh, bearer: mine)
            #expect(changed.status == 200)
            #expect(try await client.refresh(myRefresh).status == 200, "this session stays")
            #expect(try await client.refresh(otherRefreshNow).status == 400, "the others end")
            #expect(try await client.login("change@example.com", Self.password).status == 401)
            #expect(try await client.login("change@example.com", Self.fresh).status == 200)
        }
    }
}
