import BrokerClient
import BrokerCore
import BrokerCredentials
import BrokerHTTP
import BrokerTesting
import Foundation
import Synchronization
import Testing

/// The CLI's tokens per API (issue "Tokens for every door", items 2 and 3): an `api_urls` entry's `"resource"`
/// makes `broker request` send a token for that API alone, fetched once and kept beside the session; a 401 naming
/// RFC 9728 metadata that names this broker makes it ask for the resource the metadata names and send once more.
/// Driven through ``ScriptedTransport`` with the real file store.
@Suite("tokens per API, in process")
struct ResourceTokenTests {
    typealias Output = AuthenticatedRequestTests.Output
    static let broker = "http://127.0.0.1:8787"
    static let files = "http://127.0.0.1:9000/files"
    static let mcp = "http://127.0.0.1:9100/mcp"
    static let metadata = "http://127.0.0.1:9100/.well-known/oauth-protected-resource/mcp"

    struct Fixture {
        let settings: ClientSettings
        let transport = ScriptedTransport()
        let recorder = AuthenticatedRequestTests.Recorder()
        let sessions: SessionService
        let home: String
        let clock = ManualClock(start: 1_800_000_000)

        init(config: String) throws {
            home = try TemporaryDirectory.make(prefix: "broker-resource").path
            try Data(config.utf8).write(to: URL(fileURLWithPath: home + "/config.json"))
            settings = try ClientSettings(
                broker: ResourceTokenTests.broker, profile: nil, environment: ["BROKER_HOME": home])
            sessions = SessionService(
                cache: settings.credentials(),
                api: BrokerAPI(baseURL: ResourceTokenTests.broker, http: transport),
                key: settings.key, clock: clock)
            try AuthenticatedRequestTests.Fixture.storeSession(
                settings, accessToken: "session.access.token", expiresAt: 1_800_003_600)
        }

        func request(_ url: String) throws -> AuthenticatedRequest {
            let recorder = recorder
            var request = AuthenticatedRequest(
                settings: settings, target: try #require(APIURL(url)), url: url, method: "GET",
                sessions: sessions
            ) { _ in Output(recorder) }
            request.transport = transport
            request.clock = clock
            return request
        }

        /// The broker's refresh grant: each answer names the resource asked for in its token, and rotates.
        func brokerIssuesPerResource() {
            let rotation = Mutex(1)
            transport.on("POST", ResourceTokenTests.broker + "/auth/token") { request in
                let form = FormEncoding.decode(String(decoding: request.body ?? [], as: UTF8.self)) ?? []
                let fields = Dictionary(form, uniquingKeysWith: { first, _ in first })
                let (spent, next) = rotation.withLock { number in
                    defer { number += 1 }
                    return ("rt-\(number)", "rt-\(number + 1)")
                }
                #expect(fields["refresh_token"] == spent, "each grant spends the rotated token")
                let resource = fields["resource"] ?? "session"
                return ScriptedTransport.json([
                    "user_id": "custom:0b4e7a0c-3f5e-4d8e-9b5a-2c1d6e7f8a9b",
                    "access_token": .string("token-for " + resource + " " + next), "expires_in": 300,
                    "refresh_token": .string(next), "token_type": "Bearer",
                ])
            }
        }

        func authorizations(to url: String) -> [String] {
            transport.sent.filter { $0.url == url }.compactMap { request in
                request.headers.first { $0.name == "Authorization" }?.value
            }
        }

        func grants() -> [String] {
            transport.sent.filter { $0.url == ResourceTokenTests.broker + "/auth/token" }.map {
                String(decoding: $0.body ?? [], as: UTF8.self)
            }
        }
    }

    static func answer(_ status: Int, _ body: String, headers: [(name: String, value: String)] = [])
        -> ScriptedTransport.Answer
    {
        { _ in HTTPClientResponse(status: status, headers: headers, body: Array(body.utf8)) }
    }

    @Test func anAPIURLsResourceGetsItsOwnTokenOnceAndKeepsTheSessions() async throws {
        let fixture = try Fixture(
            config:
                #"{"credential_store": "file", "api_urls": [{"url": "\#(Self.files)", "resource": "\#(Self.files)"}]}"#)
        fixture.brokerIssuesPerResource()
        fixture.transport.on("GET", Self.files + "/a", Self.answer(200, "a"))
        fixture.transport.on("GET", Self.files + "/b", Self.answer(200, "b"))
        _ = try await fixture.request(Self.files + "/a").send(minValid: 60)
        _ = try await fixture.request(Self.files + "/b").send(minValid: 60)
        #expect(fixture.authorizations(to: Self.files + "/a") == ["Bearer token-for \(Self.files) rt-2"])
        #expect(fixture.authorizations(to: Self.files + "/b") == ["Bearer token-for \(Self.files) rt-2"], "cached")
        #expect(fixture.grants().count == 1)
        let stored = try #require(try fixture.sessions.cachedSession(minValid: 0))
        #expect(stored.accessToken == Secret("session.access.token"), "the session's own token is untouched")
        #expect(stored.refreshToken == Secret("rt-2"))
        #expect(stored.token(for: Self.files)?.expiresAt == fixture.clock.seconds() + 300)
        // Past its minutes, the next request gets a new one: one grant more.
        fixture.clock.advance(by: 290)
        _ = try await fixture.request(Self.files + "/a").send(minValid: 60)
        #expect(fixture.grants().count == 2)
        #expect(fixture.authorizations(to: Self.files + "/a").last == "Bearer token-for \(Self.files) rt-3")
        // A refusal of the resource's token renews that token, not the session's.
        fixture.transport.on("GET", Self.files + "/c", Self.answer(401, "no"), Self.answer(200, "c"))
        let outcome = try await fixture.request(Self.files + "/c").send(minValid: 60)
        #expect(outcome.response.status == 200)
        #expect(fixture.grants().last?.contains("resource=") == true)
        #expect(try fixture.sessions.cachedSession(minValid: 0)?.accessToken == Secret("session.access.token"))
    }

    /// RFC 9728: a 401 names the metadata; it names this broker and the resource; the token for it is sent once
    /// more. The metadata is fetched without the token.
    @Test func aChallengeNamingMetadataOfThisBrokerGetsTheResourcesToken() async throws {
        let fixture = try Fixture(config: #"{"credential_store": "file"}"#)
        fixture.brokerIssuesPerResource()
        let challenge = #"Bearer error="invalid_token", resource_metadata="\#(Self.metadata)""#
        fixture.transport.on(
            "GET", Self.mcp, Self.answer(401, "who?", headers: [(name: "WWW-Authenticate", value: challenge)]),
            Self.answer(200, "tools"))
        fixture.transport.onJSON(
            "GET", Self.metadata,
            ["resource": .string(Self.mcp), "authorization_servers": .array([.string(Self.broker)])])
        let outcome = try await fixture.request(Self.mcp).send(minValid: 60)
        #expect(outcome.response.status == 200)
        #expect(
            fixture.authorizations(to: Self.mcp) == [
                "Bearer session.access.token", "Bearer token-for \(Self.mcp) rt-2",
            ])
        let fetched = try #require(fixture.transport.sent.first { $0.url == Self.metadata })
        #expect(!fetched.headers.contains { $0.name == "Authorization" }, "no token for the metadata")
        #expect(fixture.recorder.bodies == ["tools"])
    }

    @Test func metadataThatNamesAnotherServerOrAnotherAPIIsNotFollowed() async throws {
        let cases: [(String, JSONValue?, Int)] = [
            (
                "another authorization server",
                ["resource": .string(Self.mcp), "authorization_servers": ["https://evil.example"]], 200
            ),
            (
                "another API's resource",
                ["resource": .string(Self.files), "authorization_servers": .array([.string(Self.broker)])], 200
            ),
            (
                "a resource on another origin",
                ["resource": "https://api.example/mcp", "authorization_servers": .array([.string(Self.broker)])], 200
            ),
            ("no resource", ["authorization_servers": .array([.string(Self.broker)])], 200),
            ("not JSON", nil, 200),
            ("an error", ["resource": .string(Self.mcp)], 500),
        ]
        for (why, document, status) in cases {
            let fixture = try Fixture(config: #"{"credential_store": "file"}"#)
            fixture.brokerIssuesPerResource()
            let challenge = #"Bearer resource_metadata="\#(Self.metadata)", error="invalid_token""#
            fixture.transport.on(
                "GET", Self.mcp, Self.answer(401, "who?", headers: [(name: "WWW-Authenticate", value: challenge)]))
            if let document {
                fixture.transport.onJSON("GET", Self.metadata, status: status, document)
            } else {
                fixture.transport.on("GET", Self.metadata, Self.answer(200, "<html>"))
            }
            let notices = Mutex<[String]>([])
            var request = try fixture.request(Self.mcp)
            request.notice = { message in notices.withLock { $0.append(message) } }
            do {
                _ = try await request.send(minValid: 60)
                Issue.record("\(why): the refusal should stand")
            } catch {
                #expect(error.status == .authenticationRequired, "\(why)")
            }
            #expect(!fixture.grants().contains { $0.contains("resource=") }, "\(why): no token asked for it")
            #expect(!notices.withLock { $0 }.isEmpty, "\(why): said why")
        }
    }

    @Test func aMetadataURLThatIsNotHTTPSIsIgnored() async throws {
        let fixture = try Fixture(config: #"{"credential_store": "file"}"#)
        fixture.brokerIssuesPerResource()
        let challenge = #"Bearer resource_metadata="http://metadata.example/prm""#
        fixture.transport.on(
            "GET", Self.mcp, Self.answer(401, "who?", headers: [(name: "WWW-Authenticate", value: challenge)]))
        _ = try? await fixture.request(Self.mcp).send(minValid: 60)
        #expect(!fixture.transport.sent.contains { $0.url.hasPrefix("http://metadata.example") })
    }

    @Test func challengeParametersAreReadAsRFC9110WritesThem() {
        let read = AuthenticatedRequest.parameter
        #expect(read("resource_metadata", #"Bearer resource_metadata="https://a.example/x""#) == "https://a.example/x")
        #expect(
            read("resource_metadata", #"Bearer error="x",resource_metadata=https://a.example/y"#)
                == "https://a.example/y")
        #expect(read("resource_metadata", #"Bearer x_resource_metadata="https://evil.example""#) == nil)
        #expect(read("resource_metadata", #"Bearer resource_metadata="a\"b""#) == #"a"b"#)
        #expect(read("resource_metadata", #"Bearer resource_metadata="unterminated"#) == nil)
        #expect(read("resource_metadata", "DPoP algs=\"ES256\"") == nil)
    }

    /// The store keeps the tokens per API; a damaged entry makes the file unreadable (moved aside), never
    /// half-read.
    @Test func resourceTokensSurviveTheFileAndDamageIsReported() throws {
        let home = try TemporaryDirectory.make(prefix: "broker-resource-file").path
        let cache = FileTokenCache(directory: home)
        var session = Session(
            key: SessionKey(brokerURL: Self.broker, profile: "default"),
            userID: UserID(provider: .custom, subject: "0b4e7a0c-3f5e-4d8e-9b5a-2c1d6e7f8a9b"), provider: .custom,
            accessToken: Secret("a"), expiresAt: 100, refreshToken: Secret("r"))
        session.keep(ResourceToken(resource: Self.mcp, accessToken: Secret("m"), expiresAt: 90, obtainedAt: 10), now: 0)
        session.keep(
            ResourceToken(resource: Self.files, accessToken: Secret("f"), expiresAt: 80, obtainedAt: 10), now: 0)
        let locked = try cache.locked()
        try locked.save(session)
        locked.unlock()
        #expect(try cache.session(for: session.key) == session)
        #expect(try cache.session(for: session.key)?.resourceTokens.map(\.resource) == [Self.files, Self.mcp])
        // Expired ones go when another is kept; past the limit the ones expiring first make room.
        session.keep(
            ResourceToken(resource: "https://x.example", accessToken: Secret("x"), expiresAt: 200, obtainedAt: 0),
            now: 85)
        #expect(session.resourceTokens.map(\.resource) == [Self.mcp, "https://x.example"])
        for index in 0..<40 {
            session.keep(
                ResourceToken(
                    resource: "https://\(index).example", accessToken: Secret("t"), expiresAt: 1000 + Int64(index),
                    obtainedAt: 0),
                now: 85)
        }
        #expect(session.resourceTokens.count == ResourceToken.maxPerSession)
        #expect(session.token(for: "https://39.example") != nil && session.token(for: Self.mcp) == nil)
        for damaged in [
            #""resources": "x""#, #""resources": [{"resource": "a"}]"#,
            #""resources": [{"resource": "a", "access_token": "t", "expires_at": 1}, {"resource": "a", "access_token": "u", "expires_at": 2}]"#,
        ] {
            let text =
                #"{"format": 1, "sessions": [{"broker": "\#(Self.broker)", "profile": "default", "user_id": "custom:0b4e7a0c-3f5e-4d8e-9b5a-2c1d6e7f8a9b", "provider": "custom", "access_token": "a", "expires_at": 100, \#(damaged)}]}"#
            #expect(throws: TokenCacheError.self, "\(damaged)") { try cache.decode(Array(text.utf8)) }
        }
    }
}
