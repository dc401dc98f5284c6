import BrokerCore
import BrokerCredentials
import BrokerCrypto
import BrokerHTTP
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// Tests/Interop/resource_server.py: an API (and a git server) that trusts the broker's tokens as a third
/// party does — joserfc against the broker's JWKS, the broker's /auth/me for revocation — on a clock the
/// test sets, so that "expired" needs no waiting.
final class ResourceServer: @unchecked Sendable {
    let server: ScriptServer
    var base: String { server.ready }

    /// - Parameter introspection: a CI client's `id:secret`: the API asks `/auth/introspect` whether a token is
    ///   live (the CLI's tokens are DPoP-bound, so an API cannot pass them to `/auth/me`); else `/auth/me`.
    /// - Parameter protected: `PATH=RESOURCE` pairs: APIs of their own under this server (`--protected`).
    /// - Parameter stepUp: `PATH=acr:VALUES` or `PATH=max_age:N`: calls that ask for more (RFC 9470, `--step-up`).
    init(
        broker: String, issuer: String, gitRoot: String?, introspection: String? = nil, protected: [String] = [],
        stepUp: [String] = []
    ) throws {
        server = try ScriptServer(
            TestPaths.interop("resource_server.py"),
            ["--broker", broker, "--issuer", issuer] + (gitRoot.map { ["--git-root", $0] } ?? [])
                + protected.flatMap { ["--protected", $0] } + stepUp.flatMap { ["--step-up", $0] },
            environment: introspection.map { ["RS_INTROSPECT_CLIENT": $0] } ?? [:],
            prefix: "resource server listening on ")
    }

    static func start(
        broker: String, issuer: String = "http://broker.test", gitRoot: String? = nil, introspection: String? = nil,
        protected: [String] = [], stepUp: [String] = []
    ) async throws -> ResourceServer {
        try await offThread {
            try ResourceServer(
                broker: broker, issuer: issuer, gitRoot: gitRoot, introspection: introspection, protected: protected,
                stepUp: stepUp)
        }
    }

    private func control(_ path: String, _ value: JSONValue) async throws {
        let response = try await HTTPClient.shared.send(
            HTTPClientRequest(method: "POST", url: base + path, body: Array(value.serialized().utf8)))
        guard response.status == 204 else { throw ServerTestError("\(path): \(response.status)") }
    }

    /// The moment tokens are judged at (the broker's manual clock).
    func setNow(_ seconds: Int64) async throws { try await control("/_control/now", .int(seconds)) }

    /// The moment sign-ins' ages are judged at (`--step-up PATH=max_age:N`).
    func setAuthNow(_ seconds: Int64) async throws { try await control("/_control/auth_now", .int(seconds)) }

    /// Every request must bring a DPoP proof with this nonce from now on (`nil`: none asked).
    func requireDPoPNonce(_ nonce: String?) async throws {
        try await control("/_control/dpop_nonce", nonce.map(JSONValue.string) ?? .null)
    }

    /// Trust only these keys from now on.
    func trust(_ kids: [String]) async throws {
        try await control("/_control/trust", .array(kids.map(JSONValue.string)))
    }

    struct Entry: Sendable {
        let path: String
        let method: String
        let status: Int
        let authorization: String?
        /// The X-Api-Key header, if any; the Host header.
        let apiKey: String?
        let host: String?
    }

    /// Every request so far.
    func log() async throws -> [Entry] {
        let response = try await HTTPClient.shared.send(HTTPClientRequest(url: base + "/_control/log"))
        return (JSONValue.parse(response.body)?.arrayValue ?? []).map { entry in
            Entry(
                path: entry["path"]?.stringValue ?? "", method: entry["method"]?.stringValue ?? "",
                status: Int(entry["status"]?.intValue ?? 0), authorization: entry["authorization"]?.stringValue,
                apiKey: entry["api_key"]?.stringValue, host: entry["host"]?.stringValue)
        }
    }

    deinit { server.close() }
}

/// An in-process broker on a real port (manual clock), a resource server judging tokens on the same clock,
/// and a client home for the CLI.
struct RequestWorld: Sendable {
    let broker: InProcessBroker
    let onBroker: InProcessBroker.Client
    let url: String
    let api: ResourceServer
    let client: ClientHome

    static let password = "correct horse battery staple"

    static func run(
        gitRoot: String? = nil, protected: [String] = [], stepUp: [String] = [],
        _ body: @escaping @Sendable (RequestWorld) async throws -> Void
    ) async throws {
        let broker = try await InProcessBroker(issuer: nil)
        // The API is a CI client that may introspect.
        let secret = try ClientSecretHasher.newSecret()
        try await broker.store.createClient(
            ClientRecord(
                name: "api", secretHash: broker.service.clients.clientSecrets.hash(secret), scopes: [], trust: nil,
                createdAt: broker.clock.seconds()))
        try await broker.live { onBroker, url in
            let api = try await ResourceServer.start(
                broker: url, issuer: url, gitRoot: gitRoot, introspection: "api:" + secret.exposed,
                protected: protected, stepUp: stepUp)
            try await api.setNow(broker.clock.seconds())
            let world = RequestWorld(
                broker: broker, onBroker: onBroker, url: url, api: api, client: try ClientHome(url: url))
            try await body(world)
        }
    }

    /// Moves the broker's clock and the API's together.
    func advance(by seconds: Int64) async throws {
        broker.clock.advance(by: Double(seconds))
        try await api.setNow(broker.clock.seconds())
    }

    /// `broker_refresh_tokens_total{outcome="rotated"}` at the broker: refreshes it granted.
    func refreshes() async throws -> Int {
        let text = String(decoding: try await onBroker.get("/metrics").body, as: UTF8.self)
        let line = text.split(separator: "\n").first {
            $0.hasPrefix(#"broker_refresh_tokens_total{outcome="rotated"}"#)
        }
        return line.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
    }

    func request(_ arguments: [String], stdin: String? = nil, environment: [String: String] = [:]) async throws
        -> CLI.Result
    {
        try await client.run(["request"] + arguments, stdin: stdin, environment: environment)
    }

    /// The session's refresh token revoked at the broker (RFC 7009), as `broker sessions revoke` would.
    func revokeSession() async throws {
        let refresh = try #require(try client.cached()?.refreshToken?.exposed)
        #expect(try await onBroker.form("/auth/revoke", [("token", refresh)]).status == 200)
    }

    func writeConfig(_ json: String) throws {
        try FileManager.default.createDirectory(atPath: client.home, withIntermediateDirectories: true)
        try Data(json.utf8).write(to: URL(fileURLWithPath: client.home + "/config.json"))
    }
}

@Suite("broker request: the token attached, a 401 answered by one refresh and one retry")
struct RequestCycleTests {
    @Test func anAccessTokenExpiredAtTheAPIIsRefreshedOnceAndTheSameBytesSentAgain() async throws {
        try await RequestWorld.run { world in
            try await world.client.register("cycle@example.com")
            let sub = try #require(try world.client.cached()?.userID.description)

            let first = try await world.request([world.api.base + "/api/items"])
            #expect(first.status == 0, "\(first.stderr)")
            #expect(JSONValue.parse(Array(first.stdout.utf8))?["sub"]?.stringValue == sub)
            #expect(try await world.refreshes() == 0)

            // Two hours later by the broker's and the API's clock: the token the client still believes in is
            // expired where it is judged.
            try await world.advance(by: 7200)
            let body = (0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            let file = world.client.home + "/../body.bin"
            try Data(body).write(to: URL(fileURLWithPath: file))
            let before = try await world.api.log().count
            let second = try await world.request([
                "--method", "PUT", "--data", "@" + file, world.api.base + "/api/upload",
            ])
            #expect(second.status == 0, "\(second.stderr)")
            let answer = JSONValue.parse(Array(second.stdout.utf8))
            #expect(answer?["method"]?.stringValue == "PUT")
            #expect(answer?["body_length"]?.intValue == 3000)
            #expect(answer?["body_sha256"]?.stringValue == Digest.sha256(body).hexString)
            let exchanges = try await world.api.log().dropFirst(before)
            #expect(exchanges.map(\.status) == [401, 200], "one refusal, one retry")
            #expect(exchanges.allSatisfy { $0.method == "PUT" })
            #expect(exchanges.first?.authorization != exchanges.last?.authorization, "the retry carried a new token")
            #expect(try await world.refreshes() == 1)
            #expect(!second.stdout.contains("invalid_token"), "the refused attempt's body is not shown")
        }
    }

    @Test func aSessionRevokedAtTheBrokerEndsWithExit4AndTheHintWithoutATerminal() async throws {
        try await RequestWorld.run { world in
            try await world.client.register("revoked@example.com")
            try await world.revokeSession()
            let result = try await world.request([world.api.base + "/api/items"])
            #expect(result.status == 4, "\(result.stderr)")
            #expect(result.stderr.contains("broker login"), "\(result.stderr)")
            #expect(result.stdout.isEmpty)
            #expect(try world.client.cached() == nil, "the dead session is gone")
            #expect(try await world.api.log().map(\.status) == [401])
        }
    }

    @Test func onATerminalTheSessionsSignInRunsAndTheRequestIsRetried() async throws {
        try await RequestWorld.run { world in
            try await world.client.register("terminal@example.com")
            try await world.revokeSession()
            let script: JSONValue = [
                ["Email: ", "terminal@example.com"], ["Password: ", .string(RequestWorld.password)],
            ]
            let result = try await ProcessRunner.run(
                "/usr/bin/env",
                [
                    "python3", TestPaths.interop("pty_session.py"), script.serialized(), "--", BrokerProcess.binary,
                    "request", world.api.base + "/api/after-sign-in",
                ],
                environment: world.client.environment)
            let outcome = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout) \(result.stderr)")
            let transcript = outcome["transcript"]?.stringValue ?? ""
            #expect(outcome["status"]?.intValue == 0, "\(transcript)")
            #expect(outcome["unanswered"]?.arrayValue?.isEmpty == true, "\(transcript)")
            #expect(transcript.contains("the session ended"), "\(transcript)")
            #expect(transcript.contains("/api/after-sign-in"), "the retried request's answer: \(transcript)")
            #expect(!transcript.contains(RequestWorld.password), "the password is not echoed")
            #expect(try await world.api.log().map(\.status) == [401, 200])
            #expect(try world.client.cached() != nil)
        }
    }

    @Test func aKeyTheAPINoLongerTrustsIsAnsweredByARefreshUnderTheNewKey() async throws {
        try await RequestWorld.run { world in
            try await world.client.register("rotation@example.com")
            guard case .vault(let vault) = world.broker.service.keys.source else {
                Issue.record("the keys come from the store")
                return
            }
            let rotated = try await vault.rotate(
                kind: .ecP256, now: world.broker.clock.seconds(), retention: 3700)
            await world.broker.service.maintain()
            // The API now trusts the new key only (the old one was compromised, say).
            try await world.api.trust([rotated.current.kid])
            let result = try await world.request([world.api.base + "/api/items"])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(try await world.api.log().map(\.status) == [401, 200])
            let token = try #require(try world.client.cached()?.accessToken.exposed)
            #expect(jwtParts(token).header?["kid"]?.stringValue == rotated.current.kid)
        }
    }

    @Test func twentyRequestsRefusedAtOnceMakeOneRefresh() async throws {
        try await RequestWorld.run { world in
            try await world.client.register("twenty@example.com")
            try await world.advance(by: 7200)
            let results = try await withThrowingTaskGroup(of: CLI.Result.self) { group in
                for index in 0..<20 {
                    group.addTask { try await world.request([world.api.base + "/api/\(index)"]) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            for result in results { #expect(result.status == 0, "\(result.stderr)") }
            #expect(try await world.refreshes() == 1, "one refresh for twenty refusals")
            let log = try await world.api.log()
            #expect(log.filter { $0.status == 200 }.count == 20)
        }
    }

    /// An API marked `"dpop": true` in api_urls gets the CLI's bound token as `Authorization: DPoP` with a proof
    /// by the profile's key (checked by the API with joserfc: key = cnf.jkt, htm, htu, ath, fresh jti); an API
    /// that asks for its nonce (401 use_dpop_nonce + DPoP-Nonce) gets it in the retry; other APIs get Bearer.
    @Test func aDPoPCapableAPIGetsTheBoundTokenWithAProofAndItsNonce() async throws {
        try await RequestWorld.run { world in
            try await world.client.register("dpop-api@example.com")
            try world.writeConfig(
                #"{"api_urls": [{"url": "\#(world.api.base)/api", "dpop": true}, "\#(world.api.base)/open"]}"#)
            let first = try await world.request([world.api.base + "/api/items"])
            #expect(first.status == 0, "\(first.stderr)")
            let second = try await world.request(["--method", "POST", "--data", "x", world.api.base + "/api/items"])
            #expect(second.status == 0, "\(second.stderr)")
            var log = try await world.api.log()
            #expect(log.map(\.status) == [200, 200])
            #expect(log.allSatisfy { $0.authorization?.hasPrefix("DPoP ") == true })

            try await world.api.requireDPoPNonce("api-nonce-1")
            let nonced = try await world.request([world.api.base + "/api/items"])
            #expect(nonced.status == 0, "\(nonced.stderr)")
            log = try await world.api.log()
            #expect(log.suffix(2).map(\.status) == [401, 200], "asked for the nonce, then given it")

            // Not marked (no "dpop"): Bearer first; the API's `WWW-Authenticate: DPoP` challenge (with its nonce)
            // is answered once with a proof, without renewing the session (RFC 9449 §7.1).
            try world.writeConfig(#"{"api_urls": ["\#(world.api.base)/api"]}"#)
            let refreshesBefore = try await world.refreshes()
            let challenged = try await world.request(["--fail", world.api.base + "/api/items"])
            #expect(challenged.status == 0, "\(challenged.stderr)")
            log = try await world.api.log()
            #expect(log.suffix(2).map(\.status) == [401, 200])
            #expect(log.suffix(2).map { $0.authorization?.prefix(5) ?? "" } == ["Beare", "DPoP "])
            #expect(try await world.refreshes() == refreshesBefore, "a challenge is not a refused token")

            try world.writeConfig(#"{"api_urls": [{"url": "\#(world.api.base)/api", "dpop": "yes"}]}"#)
            let broken = try await world.request([world.api.base + "/api/items"])
            #expect(broken.status == 64 || broken.status == 1)
            #expect(broken.stderr.contains("\"dpop\" must be true or false"), "\(broken.stderr)")
            try world.writeConfig(#"{"api_urls": [{"url": "\#(world.api.base)/api", "proof": true}]}"#)
            #expect(try await world.request([world.api.base + "/api/items"]).stderr.contains("unknown key \"proof\""))
        }
    }

    /// A new user's finding: `broker request "$BROKER_URL/auth/me"` exited 4 ("refused a token the broker just
    /// issued"): the CLI's tokens are DPoP-bound, and it sent them to its own broker as Bearer. It sends a proof
    /// to its own broker now.
    @Test(.bug(id: "RT3-new-user-request-own-broker")) func theCLIsBoundTokenReachesItsOwnBroker() async throws {
        try await RequestWorld.run { world in
            try await world.client.register("own@example.com")
            let me = try await world.request(["--fail", world.url + "/auth/me"])
            #expect(me.status == 0, "\(me.stderr)")
            #expect(JSONValue.parse(Array(me.stdout.utf8))?["email"] == "own@example.com", "\(me.stdout)")
            #expect(try await world.refreshes() == 0, "the first token was taken: nothing was renewed")
        }
    }

    @Test func aURLTheTokenMayNotGoToIsRefusedBeforeAnythingIsSent() async throws {
        try await RequestWorld.run { world in
            try await world.client.register("scope@example.com")
            let plain = try await world.request(["http://192.0.2.10/api/items"])
            #expect(plain.status == 64)
            #expect(plain.stderr.contains("plain http to another machine"), "\(plain.stderr)")

            try world.writeConfig(#"{"api_urls": ["\#(world.api.base)/api/allowed"]}"#)
            let outside = try await world.request([world.api.base + "/api/other"])
            #expect(outside.status == 64)
            #expect(outside.stderr.contains("not under the api_urls"), "\(outside.stderr)")
            let sideways = try await world.request([world.api.base + "/api/allowed-not"])
            #expect(sideways.status == 64, "a prefix match must end at a /")
            let dots = try await world.request([world.api.base + "/api/allowed/../other"])
            #expect(dots.status == 64, "dot segments would leave the listed path after the check")
            // RT2-11: the spellings other servers resolve as ../ (Tomcat's ..;/, decoded separators).
            for spelling in [
                "..;/other", "..%2fother", "%2e%2e%2fother", "..%5cother", "%2e%2e;x/other", "%252e%252e/x",
            ] {
                let sneaky = try await world.request([world.api.base + "/api/allowed/" + spelling])
                #expect(sneaky.status == 64, "\(spelling): \(sneaky.stderr)")
            }
            #expect(try await world.api.log().isEmpty, "nothing reached the API")

            let inside = try await world.request([world.api.base + "/api/allowed/items"])
            #expect(inside.status == 0, "\(inside.stderr)")

            // A profile's own list replaces the top-level one.
            try world.writeConfig(
                #"{"api_urls": ["https://api.example.com"], "profiles": {"default": {"api_urls": ["\#(world.api.base)/api"]}}}"#
            )
            #expect(try await world.request([world.api.base + "/api/other"]).status == 0)

            // A broken config is named and changes nothing.
            try world.writeConfig(#"{"api_urls": "https://api.example.com"}"#)
            let broken = try await world.request([world.api.base + "/api/other"])
            #expect(broken.status == 1)
            #expect(broken.stderr.contains("\"api_urls\" must be a list"), "\(broken.stderr)")
            try world.writeConfig(#"{"api_urls": ["http://api.example.com"]}"#)
            let insecure = try await world.request([world.api.base + "/api/other"])
            #expect(insecure.stderr.contains("plain http to another machine"), "\(insecure.stderr)")
            #expect(try world.client.cached() != nil)
        }
    }

    @Test func redirectsAreFollowedOnlyWhenAskedAndTheTokenNeverLeavesTheOrigin() async throws {
        try await RequestWorld.run { world in
            try await world.client.register("redirect@example.com")
            let other = try await ResourceServer.start(broker: world.url)
            let away = world.api.base + "/api/redirect?to=" + FormEncoding.percentEncode(other.base + "/open/landing")

            let unfollowed = try await world.request(["--include", away])
            #expect(unfollowed.status == 0)
            #expect(unfollowed.stderr.contains("302"), "\(unfollowed.stderr)")
            #expect(try await other.log().isEmpty)

            let followed = try await world.request(["--location", "--fail", away])
            #expect(followed.status == 0, "\(followed.stderr)")
            #expect(followed.stdout.contains("/open/landing"))
            let landed = try await other.log()
            #expect(landed.count == 1)
            #expect(landed.first?.authorization == nil, "the token stayed with its origin")

            // Within the origin the token follows.
            let home = world.api.base + "/api/redirect?to=" + FormEncoding.percentEncode("/api/landing")
            let same = try await world.request(["--location", home])
            #expect(same.status == 0, "\(same.stderr)")
            #expect(JSONValue.parse(Array(same.stdout.utf8))?["path"]?.stringValue == "/api/landing")
        }
    }

    /// RT2-12: a caller's -H headers (an API key, a cookie) stayed on a cross-origin --location hop, and
    /// -H Host: sent the token to another virtual host behind the URL's address.
    @Test(.bug(id: "RT2-12"))
    func headersStayWithTheOriginAndHostCannotPointElsewhere() async throws {
        try await RequestWorld.run { world in
            try await world.client.register("headers@example.com")
            let other = try await ResourceServer.start(broker: world.url)
            let away = world.api.base + "/api/redirect?to=" + FormEncoding.percentEncode(other.base + "/open/landing")
            let followed = try await world.request(["--location", "-H", "X-Api-Key: k-123", away])
            #expect(followed.status == 0, "\(followed.stderr)")
            #expect(try await world.api.log().last?.apiKey == "k-123", "the header reached the URL's origin")
            let landed = try await other.log()
            #expect(landed.count == 1)
            #expect(landed.first?.apiKey == nil, "the header stayed with its origin")
            #expect(landed.first?.authorization == nil)

            let before = try await world.api.log().count
            for host in ["api.internal.example", "127.0.0.1:1", "127.0.0.1/x", "127.0.0.1@evil"] {
                let vhost = try await world.request(["-H", "Host: \(host)", world.api.base + "/api/items"])
                #expect(vhost.status == 64, "\(host): \(vhost.stderr)")
                #expect(vhost.stderr.contains("names another server"), "\(vhost.stderr)")
            }
            #expect(try await world.api.log().count == before, "nothing was sent")
            let authority = String(world.api.base.dropFirst("http://".count))
            let same = try await world.request(["-H", "Host: \(authority)", world.api.base + "/api/items"])
            #expect(same.status == 0, "the URL's own host is fine: \(same.stderr)")
            #expect(try await world.api.log().last?.host == authority)
        }
    }

    @Test func usageAndFailureExitCodes() async throws {
        try await RequestWorld.run { world in
            let signedOut = try await world.request(["--no-login", world.api.base + "/api/items"])
            #expect(signedOut.status == 4)
            #expect(try await world.api.log().isEmpty)
            try await world.client.register("codes@example.com")
            for arguments in [
                ["-H", "Authorization: Bearer mine", world.api.base + "/api/x"],
                ["-H", "no colon", world.api.base + "/api/x"],
                ["--method", "GE T", world.api.base + "/api/x"],
                ["--data", "x", "--data-stdin", world.api.base + "/api/x"],
                ["--data", "@/nonexistent/file", world.api.base + "/api/x"],
                ["ftp://example.com/x"],
            ] {
                let result = try await world.request(arguments)
                #expect(result.status == 64, "\(arguments): \(result.status) \(result.stderr)")
            }
            let missing = try await world.request(["--fail", world.api.base + "/nowhere"])
            #expect(missing.status == 1)
            #expect(try await world.request([world.api.base + "/nowhere"]).status == 0, "a response arrived")
            let closed = try await world.request(["https://127.0.0.1:1/api"])
            #expect(closed.status == 1)
            #expect(closed.stderr.contains("127.0.0.1"), "\(closed.stderr)")
            #expect(try await world.api.log().map(\.status) == [404, 404])
        }
    }
}
