import BrokerCore
import BrokerHTTP
import BrokerServer
import BrokerSystem
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// The audit trail (`server.audit_log`): a scripted day against a real `broker serve` and the admin CLI on
/// its store, every event in order as one JSON object per line, no secret anywhere in it, and log rotation
/// with SIGHUP losing no line.
@Suite("Audit trail")
struct AuditTrailTests {
    struct Broker {
        let server: BrokerProcess
        let config: String

        func post(_ path: String, json: String, headers: [(name: String, value: String)] = []) async throws
            -> (status: Int, body: JSONValue?)
        {
            var request = HTTPClientRequest(
                method: "POST", url: server.url + path,
                headers: [(name: "Content-Type", value: "application/json")] + headers, body: Array(json.utf8))
            request.timeout = .seconds(120)
            let response = try await HTTPClient.shared.send(request)
            return (response.status, JSONValue.parse(response.body))
        }

        func form(_ path: String, _ fields: [(String, String)]) async throws -> (status: Int, body: JSONValue?) {
            var request = HTTPClientRequest(
                method: "POST", url: server.url + path,
                headers: [(name: "Content-Type", value: "application/x-www-form-urlencoded")],
                body: Array(FormEncoding.encode(fields).utf8))
            request.timeout = .seconds(120)
            let response = try await HTTPClient.shared.send(request)
            return (response.status, JSONValue.parse(response.body))
        }

        func cli(_ arguments: [String]) async throws -> CLI.Result {
            try await CLI.run(arguments + ["--config", config, "--data-dir", server.dataDirectory])
        }
    }

    static func lines(_ path: String) throws -> [JSONValue] {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        return try text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map { line in
            guard let value = JSONValue.parse(Array(line.utf8)), value.objectValue != nil else {
                throw ServerTestError("not a JSON object per line: \(line)")
            }
            return value
        }
    }

    @Test(.hangBound)
    func aScriptedDayIsRecordedInOrderWithoutSecretsAndSurvivesRotation() async throws {
        let directory = try BrokerProcess.temporaryDirectory()
        let auditPath = directory.appendingPathComponent("audit.log").path
        let configPath = directory.appendingPathComponent("broker.json").path
        let server = try await BrokerProcess.start(
            config: #"{"server": {"audit_log": "\#(auditPath)"}}"#, directory: directory)
        defer { server.stop() }
        let broker = Broker(server: server, config: configPath)
        let password = "correct horse battery staple \(UUID().uuidString.prefix(6))"
        let wrong = "not the password \(UUID().uuidString.prefix(6))"
        var secrets = [password, wrong]

        let registered = try await broker.post(
            "/auth/register", json: #"{"email":"audit@example.com","password":"\#(password)"}"#,
            headers: [(name: "User-Agent", value: "audit-test/1.0"), (name: "X-Request-Id", value: "day-1")])
        #expect(registered.status == 201)
        let userID = try #require(registered.body?["user_id"]?.stringValue)
        secrets += [registered.body?["access_token"]?.stringValue, registered.body?["refresh_token"]?.stringValue]
            .compactMap { $0 }
        #expect(
            try await broker.post("/auth/login", json: #"{"email":"audit@example.com","password":"\#(wrong)"}"#)
                .status == 401)
        let login = try await broker.post(
            "/auth/login", json: #"{"email":"audit@example.com","password":"\#(password)"}"#)
        let firstRefresh = try #require(login.body?["refresh_token"]?.stringValue)
        secrets += [firstRefresh, login.body?["access_token"]?.stringValue ?? ""]
        let rotated = try await broker.form(
            "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", firstRefresh)])
        secrets.append(rotated.body?["refresh_token"]?.stringValue ?? "")
        #expect(rotated.status == 200)
        #expect(
            try await broker.form("/auth/token", [("grant_type", "refresh_token"), ("refresh_token", firstRefresh)])
                .status == 400)
        let registeredRefresh = try #require(registered.body?["refresh_token"]?.stringValue)
        #expect(try await broker.form("/auth/revoke", [("token", registeredRefresh)]).status == 200)
        let added = try await broker.cli(["client", "add", "deployer", "--json"])
        #expect(added.status == 0, "\(added.stderr)")
        let clientSecret = try #require(JSONValue.parse(Array(added.stdout.utf8))?["client_secret"]?.stringValue)
        secrets.append(clientSecret)
        let refused = try await broker.form(
            "/auth/token",
            [("grant_type", "client_credentials"), ("client_id", "deployer"), ("client_secret", clientSecret + "x")])
        #expect(refused.status == 401)
        let rotatedKey = try await broker.cli(["keys", "rotate"])
        #expect(rotatedKey.status == 0, "\(rotatedKey.stderr)")

        let day = try Self.lines(auditPath)
        let events = day.map { "\($0["event"]?.stringValue ?? "?")/\($0["outcome"]?.stringValue ?? "?")" }
        #expect(
            events == [
                "registration/success", "sign_in/failure", "sign_in/success", "refresh_token_reused/failure",
                "logout/success", "client_added/success", "mint/failure", "key_rotated/success",
            ])
        #expect(day[0]["user_id"]?.stringValue == userID)
        #expect(day[0]["user_agent"]?.stringValue == "audit-test/1.0")
        #expect(day[0]["request_id"]?.stringValue == "day-1")
        #expect(day[0]["client_address"]?.stringValue == "127.0.0.1")
        #expect(day[1]["reason"]?.stringValue == "invalid_credentials")
        #expect(day[2]["user_id"]?.stringValue == userID)
        #expect(day[6]["reason"]?.stringValue == "invalid_client")
        #expect(day.allSatisfy { $0["time"]?.stringValue?.hasSuffix("Z") == true })
        let text = try String(contentsOfFile: auditPath, encoding: .utf8)
        for secret in secrets where !secret.isEmpty {
            #expect(!text.contains(secret), "the audit log carries a secret")
        }
        #expect(FileManager.default.fileExists(atPath: auditPath))
        let mode = try FileManager.default.attributesOfItem(atPath: auditPath)[.posixPermissions] as? Int
        #expect(mode == 0o600)

        // Rotation: the file is moved; events keep going to it until SIGHUP, then to a new file; none is lost.
        let rotatedPath = auditPath + ".1"
        try FileManager.default.moveItem(atPath: auditPath, toPath: rotatedPath)
        for round in 0..<3 {
            _ = try await broker.post(
                "/auth/login", json: #"{"email":"audit@example.com","password":"wrong \#(round)"}"#)
        }
        server.process.send(SIGHUP)
        let reopened = try await eventually { server.stderr.contains("audit log reopened") }
        #expect(reopened, "no reopen logged: \(server.stderr.suffix(500))")
        for round in 3..<5 {
            _ = try await broker.post(
                "/auth/login", json: #"{"email":"audit@example.com","password":"wrong \#(round)"}"#)
        }
        #expect(server.process.isRunning, "SIGHUP must not end the broker")
        let before = try Self.lines(rotatedPath)
        let after = try Self.lines(auditPath)
        #expect(before.count == day.count + 3)
        #expect(after.count == 2)
        #expect((before.dropFirst(day.count) + after).allSatisfy { $0["event"]?.stringValue == "sign_in" })
    }

    @Test(.hangBound)
    func eventsKeptInTheStoreAreListedByTheCLI() async throws {
        let directory = try BrokerProcess.temporaryDirectory()
        let auditPath = directory.appendingPathComponent("audit.log").path
        let server = try await BrokerProcess.start(
            config: #"{"server": {"audit_log": "\#(auditPath)", "audit_store": true}}"#, directory: directory)
        defer { server.stop() }
        let broker = Broker(server: server, config: directory.appendingPathComponent("broker.json").path)
        let registered = try await broker.post(
            "/auth/register", json: #"{"email":"kept@example.com","password":"correct horse battery staple"}"#)
        let userID = try #require(registered.body?["user_id"]?.stringValue)
        #expect(
            try await broker.post("/auth/login", json: #"{"email":"kept@example.com","password":"nope nope nope"}"#)
                .status == 401)
        #expect(try await broker.cli(["client", "add", "kept-client"]).status == 0)

        // The broker stores events from a task of its own: wait for the three to arrive (an event, not a window).
        var listed: [Substring] = []
        _ = try await eventually {
            listed = try await broker.cli(["audit", "list"]).stdout.split(separator: "\n")
            return listed.count >= 3
        }
        let file = try String(contentsOfFile: auditPath, encoding: .utf8).split(separator: "\n")
        #expect(listed == file, "the store holds exactly the lines of the audit log, in order")
        #expect(listed.count == 3)
        let mine = try await broker.cli(["audit", "list", "--user", userID])
        #expect(mine.stdout.split(separator: "\n").count == 1)
        #expect(mine.stdout.contains(#""event":"registration""#))
        let future = try await broker.cli(["audit", "list", "--since", "2099-01-01T00:00:00Z"])
        #expect(future.status == 0 && future.stdout.isEmpty)
        let newest = try await broker.cli(["audit", "list", "--limit", "1"])
        #expect(newest.stdout.contains(#""event":"client_added""#))
        let bad = try await broker.cli(["audit", "list", "--since", "yesterday"])
        #expect(bad.status == 64)
        #expect(bad.stderr.contains("--since must be"))
    }

    @Test func anUnwritableAuditLogStopsTheStartWithItsName() async throws {
        let directory = try BrokerProcess.temporaryDirectory()
        let missing = directory.appendingPathComponent("no/such/folder/audit.log").path
        do {
            let server = try await BrokerProcess.start(config: #"{"server": {"audit_log": "\#(missing)"}}"#)
            server.stop()
            Issue.record("broker serve started with an audit log it cannot open")
        } catch {
            #expect("\(error)".contains("cannot open the audit log"))
            #expect("\(error)".contains(missing))
        }
    }

    @Test func anAuditLineThatCannotBeWrittenIsReportedAndTheBrokerGoesOn() async throws {
        // /dev/full opens, and every write to it fails with ENOSPC: a full disk under the audit log.
        try #require(FileManager.default.fileExists(atPath: "/dev/full"))
        let server = try await BrokerProcess.start(config: #"{"server": {"audit_log": "/dev/full"}}"#)
        defer { server.stop() }
        #expect(try await server.register("full@example.com", "correct horse battery").status == 201)
        #expect(try await server.get("/healthz").status == 200)
        #expect(try await server.terminate() == 0)
        #expect(
            server.stderr.contains("audit event registration not written to /dev/full: No space left on device"),
            "\(server.stderr.suffix(800))")
    }

    @Test func jsonLogsAreOneObjectPerLineWithTheRequestID() async throws {
        let server = try await BrokerProcess.start(arguments: ["--log-format", "json"])
        var request = HTTPClientRequest(
            url: server.url + "/healthz", headers: [(name: "X-Request-Id", value: "json-log-1")])
        request.timeout = .seconds(120)
        #expect(try await HTTPClient.shared.send(request).status == 200)
        #expect(try await server.terminate() == 0)
        let lines = server.stderr.split(separator: "\n")
        #expect(!lines.isEmpty)
        for line in lines {
            let object = JSONValue.parse(Array(line.utf8))?.objectValue
            #expect(object?["level"]?.stringValue != nil && object?["message"]?.stringValue != nil, "\(line)")
            #expect(object?["time"]?.stringValue?.hasSuffix("Z") == true)
        }
        let requestLine = lines.compactMap { JSONValue.parse(Array($0.utf8)) }.first {
            $0["message"]?.stringValue == "request" && $0["http.path"]?.stringValue == "/healthz"
        }
        #expect(requestLine?["request_id"]?.stringValue == "json-log-1")
        #expect(requestLine?["http.status"]?.stringValue == "200")

        let bad = try await CLI.run(["serve", "--log-format", "yaml"])
        #expect(bad.status == 64)
        #expect(bad.stderr.contains("--log-format must be text or json"))
    }

    @Test func timestampsAreRFC3339UTC() {
        #expect(AuditTrail.timestamp(0) == "1970-01-01T00:00:00Z")
        #expect(AuditTrail.timestamp(1_800_000_000) == "2027-01-15T08:00:00Z")
    }
}
