import BrokerClient
import BrokerCore
import BrokerCredentials
import BrokerHTTP
import BrokerTesting
import Foundation
import Synchronization
import Testing

/// `broker request`'s cycle in BrokerClient (issue 30, a thin CLI): attach the token; on a 401 renew once and
/// send the same bytes again; a refusal after that, or a refused refresh with no one to ask, ends as
/// "authentication required"; the token and the caller's headers stay at the URL's origin. Driven through
/// ``ScriptedTransport`` — the API and the broker's `/auth/token` are scripted, the session cache is the real
/// file store in a temporary home.
@Suite("broker request's cycle, in process")
struct AuthenticatedRequestTests {
    static let broker = "http://127.0.0.1:8787"
    static let api = "http://127.0.0.1:9000/v1/items"

    /// What the attempts showed, in order: one entry per attempt's body write.
    final class Recorder: Sendable {
        let shown = Mutex<[String]>([])
        var bodies: [String] { shown.withLock { $0 } }
    }

    final class Output: ResponseOutput, @unchecked Sendable {
        let recorder: Recorder
        var carriesToken = false
        init(_ recorder: Recorder) { self.recorder = recorder }
        func begin(statusLine: String, status: Int, headers: [(name: String, value: String)]) -> Bool { false }
        func write(_ bytes: UnsafeRawBufferPointer) -> Bool { true }
        func showHead(of response: HTTPClientResponse) {}
        func writeBody(_ bytes: [UInt8]) -> Bool {
            recorder.shown.withLock { $0.append(String(decoding: bytes, as: UTF8.self)) }
            return true
        }
    }

    struct Fixture {
        let settings: ClientSettings
        let transport = ScriptedTransport()
        let recorder = Recorder()
        let sessions: SessionService

        init() throws {
            let home = try TemporaryDirectory.make(prefix: "broker-request").path
            try Data(#"{"credential_store": "file"}"#.utf8).write(to: URL(fileURLWithPath: home + "/config.json"))
            settings = try ClientSettings(
                broker: AuthenticatedRequestTests.broker, profile: nil, environment: ["BROKER_HOME": home])
            sessions = SessionService(
                cache: settings.credentials(),
                api: BrokerAPI(baseURL: AuthenticatedRequestTests.broker, http: transport),
                key: settings.key)
            try Self.storeSession(settings, accessToken: "first.access.token", expiresAt: 4_000_000_000)
        }

        /// Stores a custom user's session with this access token and the refresh token `rt-1` in `settings`' store.
        static func storeSession(_ settings: ClientSettings, accessToken: String, expiresAt: Int64) throws {
            let locked = try settings.credentials().locked()
            defer { locked.unlock() }
            _ = try locked.save(
                Session(
                    key: settings.key,
                    userID: UserID(provider: .custom, subject: "0b4e7a0c-3f5e-4d8e-9b5a-2c1d6e7f8a9b"),
                    provider: .custom, accessToken: Secret(accessToken), expiresAt: expiresAt,
                    refreshToken: Secret("rt-1")))
        }

        func request(
            _ url: String = AuthenticatedRequestTests.api, method: String = "POST", body: String? = "{\"n\":1}"
        ) throws
            -> AuthenticatedRequest
        {
            let recorder = recorder
            var request = AuthenticatedRequest(
                settings: settings, target: try #require(APIURL(url)), url: url, method: method,
                headers: [(name: "X-Api-Key", value: "caller-key")], body: body.map { Array($0.utf8) },
                sessions: sessions
            ) { _ in Output(recorder) }
            request.transport = transport
            return request
        }

        /// The broker renews with `rt-1` and answers a new pair.
        func brokerRenews(to token: String = "second.access.token") {
            transport.on("POST", AuthenticatedRequestTests.broker + "/auth/token") { request in
                #expect(String(decoding: request.body ?? [], as: UTF8.self).contains("refresh_token=rt-1"))
                return ScriptedTransport.json([
                    "user_id": "custom:0b4e7a0c-3f5e-4d8e-9b5a-2c1d6e7f8a9b", "access_token": .string(token),
                    "expires_in": 300, "refresh_token": "rt-2", "token_type": "Bearer",
                ])
            }
        }

        func sentToAPI() -> [HTTPClientRequest] {
            transport.sent.filter { !$0.url.hasPrefix(AuthenticatedRequestTests.broker) }
        }
    }

    static func answer(_ status: Int, _ body: String, headers: [(name: String, value: String)] = [])
        -> ScriptedTransport.Answer
    {
        { _ in HTTPClientResponse(status: status, headers: headers, body: Array(body.utf8)) }
    }

    @Test func a401IsAnsweredByOneRenewalAndTheSameBytesOnceMore() async throws {
        let fixture = try Fixture()
        fixture.transport.on("POST", Self.api, Self.answer(401, "stale"), Self.answer(200, "fresh answer"))
        fixture.brokerRenews()
        let outcome = try await fixture.request().send(minValid: 60)
        #expect(outcome.response.status == 200 && !outcome.refusedToken)
        let sent = fixture.sentToAPI()
        #expect(sent.count == 2)
        #expect(
            sent.map { $0.headers.first { $0.name == "Authorization" }?.value } == [
                "Bearer first.access.token", "Bearer second.access.token",
            ])
        #expect(sent.allSatisfy { $0.body == Array("{\"n\":1}".utf8) }, "the retry sends the same bytes")
        #expect(fixture.recorder.bodies == ["fresh answer"], "the 401 that was answered by a retry is held back")
        #expect(
            try fixture.sessions.cachedSession(minValid: 0)?.refreshToken == Secret("rt-2"), "the rotated pair is kept")
    }

    @Test func aTokenRefusedAfterTheRenewalIsAuthenticationRequiredWithTheChallenge() async throws {
        let fixture = try Fixture()
        let challenge = #"Bearer error="invalid_token", error_description="unknown key""#
        fixture.transport.on(
            "POST", Self.api, Self.answer(401, "no", headers: [(name: "WWW-Authenticate", value: challenge)]))
        fixture.brokerRenews()
        let failure = await #expect(throws: AuthenticatedRequest.Failure.self) {
            try await fixture.request().send(minValid: 60)
        }
        guard case .refusedAfterRenewal(let origin, let signedIn, let given)? = failure else {
            Issue.record("\(String(describing: failure))")
            return
        }
        #expect(origin == "http://127.0.0.1:9000" && !signedIn && given == challenge)
        #expect(failure.map { ExitStatus.of($0) } == .authenticationRequired)
        #expect(fixture.sentToAPI().count == 2, "one retry, not a loop")
        #expect(fixture.recorder.bodies == ["no"], "the final refusal is shown")
    }

    @Test func aRefusedRenewalWithNoOneToAskIsTheSessionsErrorAndNothingIsSentAgain() async throws {
        let fixture = try Fixture()
        fixture.transport.on("POST", Self.api, Self.answer(401, "stale"))
        fixture.transport.onJSON(
            "POST", Self.broker + "/auth/token", status: 400,
            ["error": "invalid_grant", "error_description": "the refresh token was revoked"])
        let failure = await #expect(throws: AuthenticatedRequest.Failure.self) {
            try await fixture.request().send(minValid: 60)
        }
        guard case .session(let error)? = failure else {
            Issue.record("\(String(describing: failure))")
            return
        }
        #expect(ExitStatus.of(error) == .authenticationRequired)
        #expect(fixture.sentToAPI().count == 1)
        #expect(fixture.recorder.bodies.isEmpty, "the held-back 401 is not shown")
    }

    @Test func withSomeoneToAskARefusedRenewalSignsInOnceAndSendsAgain() async throws {
        let fixture = try Fixture()
        fixture.transport.on("POST", Self.api, Self.answer(401, "stale"), Self.answer(200, "after sign-in"))
        fixture.transport.onJSON("POST", Self.broker + "/auth/token", status: 400, ["error": "invalid_grant"])
        let asked = Mutex<[ProviderID?]>([])
        let notices = Mutex<[String]>([])
        var request = try fixture.request()
        let settings = fixture.settings
        request.signIn = { provider in
            asked.withLock { $0.append(provider) }
            let locked = try settings.credentials().locked()
            defer { locked.unlock() }
            _ = try locked.save(
                Session(
                    key: settings.key, userID: UserID("custom:0b4e7a0c-3f5e-4d8e-9b5a-2c1d6e7f8a9b")!,
                    provider: .custom, accessToken: Secret("signed.in.token"), expiresAt: 4_000_000_000,
                    refreshToken: Secret("rt-new")))
        }
        request.notice = { message in notices.withLock { $0.append(message) } }
        let outcome = try await request.send(minValid: 60)
        #expect(outcome.response.status == 200)
        #expect(asked.withLock { $0 } == [.custom], "the session's own provider, once")
        #expect(notices.withLock { $0.count } == 1 && notices.withLock { $0[0] }.hasPrefix("the session ended"))
        #expect(
            fixture.sentToAPI().last?.headers.contains { $0 == ("Authorization", "Bearer signed.in.token") } == true)
    }

    @Test func theTokenAndTheCallersHeadersStayAtTheOriginAcrossRedirects() async throws {
        let fixture = try Fixture()
        let elsewhere = "http://127.0.0.2:9000/landing"
        fixture.transport.on("GET", Self.api) { _ in
            var response = HTTPClientResponse(status: 302, headers: [(name: "Location", value: elsewhere)], body: [])
            response.redirectURL = elsewhere
            return response
        }
        fixture.transport.on("GET", elsewhere, Self.answer(200, "landed"))
        var request = try fixture.request(method: "GET", body: nil)
        request.followRedirects = true
        let outcome = try await request.send(minValid: 60)
        #expect(outcome.finalURL.description == elsewhere && outcome.response.status == 200)
        let sent = fixture.sentToAPI()
        #expect(sent.count == 2)
        #expect(
            sent[0].headers.contains { $0.name == "Authorization" }
                && sent[0].headers.contains { $0.name == "X-Api-Key" })
        #expect(sent[1].headers.isEmpty, "\(sent[1].headers)")
        #expect(fixture.recorder.bodies == ["landed"], "a followed redirect's body is not shown")

        // Without following, the redirect is the answer.
        let unfollowed = try await fixture.request(method: "GET", body: nil).send(minValid: 60)
        #expect(unfollowed.response.status == 302 && fixture.sentToAPI().count == 3)
    }

    @Test func aRedirectLoopEndsAtTheLimit() async throws {
        let fixture = try Fixture()
        fixture.transport.on("GET", Self.api) { _ in
            var response = HTTPClientResponse(status: 307, headers: [], body: [])
            response.redirectURL = Self.api
            return response
        }
        var request = try fixture.request(method: "GET", body: nil)
        request.followRedirects = true
        request.maxRedirects = 3
        let failure = await #expect(throws: AuthenticatedRequest.Failure.self) { try await request.send(minValid: 60) }
        guard case .tooManyRedirects(let limit, _)? = failure else {
            Issue.record("\(String(describing: failure))")
            return
        }
        #expect(limit == 3 && fixture.sentToAPI().count == 4)
        #expect(failure?.status == .failure)
    }

    @Test func aTransportFailureNamesTheMethodAndOrigin() async throws {
        let fixture = try Fixture()
        fixture.transport.on("GET", Self.api, ScriptedTransport.failure(.connectionFailed, "connection refused"))
        let failure = await #expect(throws: AuthenticatedRequest.Failure.self) {
            try await fixture.request(method: "GET", body: nil).send(minValid: 60)
        }
        #expect(failure?.description == "GET http://127.0.0.1:9000: connection refused")
        #expect(failure?.status == .failure)
    }
}
