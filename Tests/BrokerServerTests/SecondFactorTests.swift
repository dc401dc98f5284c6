import BrokerCore
import BrokerCrypto
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// Issue "A second factor": TOTP against an implementation nobody here wrote (pyotp), the code step of every
/// password sign-in, recovery codes, the policy, and what tokens say about it. The broker's clock is the
/// test's: windows are crossed by moving it.
@Suite("A second factor: TOTP, recovery codes, acr 2")
struct SecondFactorTests {
    typealias OP = OpenIDProviderTests
    typealias Flow = InProcessBrowserFlowTests
    typealias Client = InProcessBroker.Client
    typealias Reply = InProcessBroker.Client.Reply

    // MARK: The algorithm

    @Test func rfc6238VectorsAndBase32() {
        // RFC 6238 Appendix B (SHA-1), the last six of its eight digits.
        let key = Array("12345678901234567890".utf8)
        for (time, code) in [
            (Int64(59), "287082"), (1_111_111_109, "081804"), (1_234_567_890, "005924"), (2_000_000_000, "279037"),
        ] {
            #expect(TOTP.code(key: key, step: TOTP.step(at: time)) == code, "T = \(time)")
        }
        #expect(Base32.encode(key) == "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ")
        #expect(Base32.decode("gezd gnbv gy3t qojq gezd gnbv gy3t qojq") == key, "as typed from a screen")
        #expect(Base32.decode("GEZ1") == nil, "1 is no base32 letter")
        #expect(TOTP.matchingStep(key: key, code: "28708", now: 59) == nil, "five digits")
        #expect(TOTP.matchingStep(key: key, code: "28708x", now: 59) == nil)
        #expect(TOTP.matchingStep(key: key, code: "287082", now: 59 + 30) == 1, "one step late")
        #expect(TOTP.matchingStep(key: key, code: "287082", now: 59 + 60) == nil, "two steps late")
        let uri = TOTP.uri(key: key, issuer: "broker.example", account: "ada+x@example.com")
        #expect(
            uri == "otpauth://totp/broker.example:ada%2Bx@example.com?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
                + "&issuer=broker.example&algorithm=SHA1&digits=6&period=30")
    }

    // MARK: Helpers

    /// The code pyotp computes for `key` (base32) at `time`; the key goes on stdin, never argv.
    static func pyotp(_ key: String, at time: Int64) async throws -> String {
        let output = try await ProcessRunner.run(
            "python3",
            ["-c", "import sys, pyotp; print(pyotp.TOTP(sys.stdin.read().strip()).at(int(sys.argv[1])))", "\(time)"],
            stdin: Array(key.utf8))
        #expect(output.status == 0, "\(output.stderr)")
        return output.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func postJSON(_ client: Client, _ uri: String, _ body: JSONValue, bearer: String? = nil) async throws
        -> Reply
    {
        var headers: HTTPFields = [.contentType: "application/json"]
        if let bearer { headers[.authorization] = "Bearer \(bearer)" }
        return try await client.send(.post, uri, headers: headers, body: Array(body.serialized().utf8))
    }

    static func login(_ client: Client, _ email: String, otp: String? = nil) async throws -> Reply {
        var body: [String: JSONValue] = ["email": .string(email), "password": .string(OP.password)]
        if let otp { body["otp"] = .string(otp) }
        return try await postJSON(client, "/auth/login", .object(body))
    }

    /// A registered account with an authenticator app added (through the API, as `broker mfa totp add` does):
    /// its base32 key and recovery codes.
    static func enrolled(_ broker: InProcessBroker, _ client: Client, _ email: String) async throws
        -> (key: String, codes: [String], user: UserID)
    {
        let registered = try await client.register(email, OP.password)
        #expect(registered.status == 201)
        let user = try #require(registered["user_id"]?.stringValue.flatMap(UserID.init))
        let token = try await client.accountToken(registered)
        let started = try await postJSON(client, "/auth/mfa/totp", [:], bearer: token)
        #expect(started.status == 200, "\(started.json?.serialized() ?? "")")
        let key = try #require(started["key"]?.stringValue)
        #expect(started["otpauth_uri"]?.stringValue?.contains("secret=\(key)") == true)
        let code = try await pyotp(key, at: broker.clock.seconds())
        let confirmed = try await postJSON(
            client, "/auth/mfa/totp/confirm",
            ["enrolment": .string(try #require(started["enrolment"]?.stringValue)), "code": .string(code)])
        #expect(confirmed.status == 201, "\(confirmed.json?.serialized() ?? "")")
        let codes = (confirmed["recovery_codes"]?.arrayValue ?? []).compactMap(\.stringValue)
        #expect(codes.count == 10 && Set(codes).count == 10)
        return (key, codes, user)
    }

    // MARK: Through the broker

    @Test func codesPyotpComputesSignInOnceWithinTheWindowOnly() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let (key, codes, user) = try await Self.enrolled(broker, client, "ada@example.com")
            // Stored sealed: the key is not in the row.
            let factor = try #require(try await broker.store.totpFactor(user: user))
            #expect(!factor.sealedKey.contains(key) && Base64URL.decode(factor.sealedKey) != nil)

            let asked = try await Self.login(client, "ada@example.com")
            #expect(asked.status == 401 && asked.error == "mfa_required", "the password alone is not enough")
            #expect(asked["access_token"] == nil)

            // The code that confirmed the enrolment has been used.
            let confirming = try await Self.pyotp(key, at: broker.clock.seconds())
            #expect(try await Self.login(client, "ada@example.com", otp: confirming).status == 401)

            broker.clock.advance(by: 30)
            let now = broker.clock.seconds()
            let good = try await Self.pyotp(key, at: now)
            let signedIn = try await Self.login(client, "ada@example.com", otp: good)
            #expect(signedIn.status == 200)
            let access = try #require(signedIn["access_token"]?.stringValue)
            let claims = try #require(jwtParts(access).claims)
            #expect(claims["acr"] == "2" && claims["amr"] == ["pwd", "otp", "mfa"] && claims["idp"] == "custom")
            #expect(signedIn["provider"] == "custom", "the CLI still knows the account as a password account")
            let replayed = try await Self.login(client, "ada@example.com", otp: good)
            #expect(replayed.status == 401 && replayed.error == "invalid_credentials", "a code signs in once")

            // A clock 30 s behind is inside the window; 60 s ahead or 90 s behind is not.
            broker.clock.advance(by: 30)
            #expect(
                try await Self.login(client, "ada@example.com", otp: Self.pyotp(key, at: now)).status == 401,
                "the step just used (as a code 30 s behind) does not come back")
            broker.clock.advance(by: 30)
            let later = broker.clock.seconds()
            #expect(try await Self.login(client, "ada@example.com", otp: Self.pyotp(key, at: later + 60)).status == 401)
            #expect(try await Self.login(client, "ada@example.com", otp: Self.pyotp(key, at: later - 90)).status == 401)
            #expect(try await Self.login(client, "ada@example.com", otp: Self.pyotp(key, at: later - 30)).status == 200)

            // A recovery code, typed as people do, once.
            let recovery = codes[3].uppercased().replacingOccurrences(of: "-", with: " ")
            #expect(try await Self.login(client, "ada@example.com", otp: recovery).status == 200)
            #expect(try await Self.login(client, "ada@example.com", otp: codes[3]).status == 401)
            #expect(try await broker.store.recoveryCodesLeft(user: user) == 9)
            #expect(try await Self.login(client, "ada@example.com", otp: "zzzzz-zzzzz").status == 401)
        }
    }

    @Test func wrongCodesShareTheLoginThrottle() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            _ = try await Self.enrolled(broker, client, "bo@example.com")
            var statuses: [Int] = []
            for guess in 0..<8 {
                statuses.append(try await Self.login(client, "bo@example.com", otp: "00000\(guess)").status)
            }
            #expect(statuses.prefix(5).allSatisfy { $0 == 401 }, "\(statuses)")
            #expect(statuses.last == 429, "guessing codes is throttled like guessing passwords: \(statuses)")
        }
    }

    @Test func removalAndNewRecoveryCodesNeedAFreshProofNotJustAToken() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let (key, codes, user) = try await Self.enrolled(broker, client, "cy@example.com")
            broker.clock.advance(by: 30)
            let signedIn = try await Self.login(
                client, "cy@example.com", otp: Self.pyotp(key, at: broker.clock.seconds()))
            let token = try await client.accountToken(signedIn)
            let status = try await client.get("/auth/mfa", bearer: token)
            #expect(status["totp"] == true && status["recovery_codes_left"] == 10)
            // A bearer token alone changes nothing.
            let tokenOnly = try await Self.postJSON(
                client, "/auth/mfa/totp/remove", ["password": .string(OP.password)], bearer: token)
            #expect(tokenOnly.status == 400)
            let wrongPassword = try await Self.postJSON(
                client, "/auth/mfa/totp/remove", ["password": "not it at all", "code": .string(codes[0])], bearer: token
            )
            #expect(wrongPassword.status == 401)
            #expect(try await broker.store.totpFactor(user: user) != nil, "nothing removed")
            #expect(try await broker.store.recoveryCodesLeft(user: user) == 10, "the code was not spent")
            let access = try #require(signedIn["access_token"]?.stringValue)
            let withAccessToken = try await Self.postJSON(
                client, "/auth/mfa/recovery-codes", ["code": .string(codes[1])], bearer: access)
            #expect(withAccessToken.status == 401, "an API access token never manages the account (RT2-1)")

            let renewed = try await Self.postJSON(
                client, "/auth/mfa/recovery-codes", ["code": .string(codes[1])], bearer: token)
            #expect(renewed.status == 200)
            let fresh = (renewed["recovery_codes"]?.arrayValue ?? []).compactMap(\.stringValue)
            #expect(fresh.count == 10 && Set(fresh).isDisjoint(with: codes))
            #expect(
                try await Self.login(client, "cy@example.com", otp: codes[2]).status == 401, "the old codes are gone")

            let removed = try await Self.postJSON(
                client, "/auth/mfa/totp/remove", ["password": .string(OP.password), "code": .string(fresh[0])],
                bearer: token)
            #expect(removed.status == 200)
            #expect(try await broker.store.totpFactor(user: user) == nil)
            #expect(try await broker.store.recoveryCodesLeft(user: user) == 0)
            let plain = try await Self.login(client, "cy@example.com")
            #expect(plain.status == 200)
            let plainAccess = try #require(plain["access_token"]?.stringValue)
            let claims = try #require(jwtParts(plainAccess).claims)
            #expect(claims["acr"] == "1" && claims["amr"] == ["pwd"])
        }
    }

    @Test func aBadEnrolmentOrCodeSaysWhyAndStoresNothing() async throws {
        let broker = try await InProcessBroker()
        try await broker.test { client in
            let registered = try await client.register("di@example.com", OP.password)
            let user = try #require(registered["user_id"]?.stringValue.flatMap(UserID.init))
            let token = try await client.accountToken(registered)
            let started = try await Self.postJSON(client, "/auth/mfa/totp", [:], bearer: token)
            let enrolment = try #require(started["enrolment"]?.stringValue)
            for (body, status) in [
                (["enrolment": "garbage", "code": "123456"] as JSONValue, 400),
                (["enrolment": .string(enrolment + "x"), "code": "123456"], 400),
                (["enrolment": .string(enrolment), "code": 123456], 400),
                (["enrolment": .string(enrolment), "code": "000000"], 400),
                (["enrolment": .string(enrolment)], 400),
            ] {
                let reply = try await Self.postJSON(client, "/auth/mfa/totp/confirm", body)
                #expect(reply.status == status && reply.error != nil, "\(body.serialized()) → \(reply.status)")
            }
            broker.clock.advance(by: 601)  // an enrolment waits ten minutes for its first code
            let key = try #require(started["key"]?.stringValue)
            let late = try await Self.postJSON(
                client, "/auth/mfa/totp/confirm",
                [
                    "enrolment": .string(enrolment),
                    "code": .string(try await Self.pyotp(key, at: broker.clock.seconds())),
                ])
            #expect(late.status == 400 && late["error_description"]?.stringValue?.contains("expired") == true)
            #expect(try await broker.store.totpFactor(user: user) == nil, "nothing was stored")
            #expect(try await Self.login(client, "di@example.com").status == 200, "and the sign-in is as before")
            // Only the password's owner starts one without a session.
            let wrong = try await Self.postJSON(
                client, "/auth/mfa/totp", ["email": "di@example.com", "password": "not the password"])
            #expect(wrong.status == 401 && wrong["enrolment"] == nil)
        }
    }

    @Test func anAppsSignInPageAsksForTheCodeAfterThePassword() async throws {
        let broker = try await InProcessBroker()
        try await OP.register(broker, firstParty: true)
        try await broker.test { client in
            let (key, _, _) = try await Self.enrolled(broker, client, "ed@example.com")
            broker.clock.advance(by: 30)
            let jar = OP.Jar()
            let page = try await OP.get(client, OP.authorizeURI(OP.webRequest()), jar)
            let asked = try await OP.passwordSignIn(client, page: page, jar, email: "ed@example.com")
            #expect(asked.status == 200 && OP.destination(asked) == nil, "no code for the app yet")
            let html = String(decoding: asked.body, as: UTF8.self)
            #expect(html.contains("name=\"otp\"") && html.contains("autocomplete=\"one-time-code\""))
            func submit(_ page: Reply, _ code: String) async throws -> Reply {
                try await OP.post(
                    client, "/auth/authorize/mfa",
                    [
                        ("request", try #require(OP.hidden(page, "request"))),
                        ("csrf", try #require(OP.hidden(page, "csrf"))),
                        ("ticket", try #require(OP.hidden(page, "ticket"))), ("otp", code),
                    ], jar)
            }
            let wrong = try await submit(asked, "000000")
            #expect(
                wrong.status == 401
                    && String(decoding: wrong.body, as: UTF8.self).contains("Wrong or already used code"))
            let done = try await submit(wrong, try await Self.pyotp(key, at: broker.clock.seconds()))
            let destination = try #require(OP.destination(done))
            let tokens = try await OP.redeem(client, code: try #require(Flow.query(destination)["code"]))
            let idTokenText = try #require(tokens["id_token"]?.stringValue)
            let idToken = try #require(jwtParts(idTokenText).claims)
            #expect(idToken["acr"] == "2" && idToken["amr"] == ["pwd", "otp", "mfa"] && idToken["idp"] == "custom")

            let other = OP.Jar()
            let again = try await OP.passwordSignIn(
                client, page: try await OP.get(client, OP.authorizeURI(OP.webRequest()), other), other,
                email: "ed@example.com")
            let forged = try await OP.post(
                client, "/auth/authorize/mfa",
                [
                    ("request", try #require(OP.hidden(again, "request"))),
                    ("csrf", try #require(OP.hidden(again, "csrf"))),
                    ("ticket", "forged"), ("otp", "000000"),
                ], other)
            #expect(forged.status == 400 && OP.destination(forged) == nil, "a made-up ticket is a new sign-in")
        }
    }

    @Test func theBrokerOrAnAppCanRequireASecondFactor() async throws {
        let strict = try await InProcessBroker(config: #"{"server": {"require_mfa": true}}"#)
        try await strict.test { client in
            #expect(try await client.register("fy@example.com", OP.password).status == 201)
            let refused = try await Self.login(client, "fy@example.com")
            #expect(refused.status == 403 && refused.error == "mfa_enrollment_required")
            #expect(refused["error_description"]?.stringValue?.contains("broker mfa totp add") == true)
            // The password alone is how such an account adds one.
            let started = try await Self.postJSON(
                client, "/auth/mfa/totp", ["email": "fy@example.com", "password": .string(OP.password)])
            let key = try #require(started["key"]?.stringValue)
            let confirmed = try await Self.postJSON(
                client, "/auth/mfa/totp/confirm",
                [
                    "enrolment": .string(try #require(started["enrolment"]?.stringValue)),
                    "code": .string(try await Self.pyotp(key, at: strict.clock.seconds())),
                ])
            #expect(confirmed.status == 201)
            strict.clock.advance(by: 30)
            #expect(
                try await Self.login(client, "fy@example.com", otp: Self.pyotp(key, at: strict.clock.seconds())).status
                    == 200)
        }

        let broker = try await InProcessBroker()
        try await broker.store.createApp(
            AppRecord(
                clientID: "web", secretHash: broker.service.appTokens.secrets.hash(Secret(OP.secret)),
                redirectURIs: [OP.web], firstParty: true, createdAt: broker.clock.seconds(), requireMFA: true))
        #expect(try await broker.store.app(clientID: "web")?.requireMFA == true, "kept by the store")
        try await broker.test { client in
            #expect(try await client.register("gu@example.com", OP.password).status == 201)
            #expect(try await Self.login(client, "gu@example.com").status == 200, "the CLI is not that app")
            let jar = OP.Jar()
            let page = try await OP.get(client, OP.authorizeURI(OP.webRequest()), jar)
            #expect(String(decoding: page.body, as: UTF8.self).contains("asks for two factors"))
            let refused = try await OP.passwordSignIn(client, page: page, jar, email: "gu@example.com")
            #expect(refused.status == 403 && OP.destination(refused) == nil)
            #expect(String(decoding: refused.body, as: UTF8.self).contains("broker mfa totp add"))
        }
    }
}
