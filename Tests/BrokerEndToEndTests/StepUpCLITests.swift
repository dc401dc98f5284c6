import BrokerCore
import BrokerCrypto
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// Issue "A second factor", item 4: `broker request` against an API that answers RFC 9470 challenges
/// (Tests/Interop/resource_server.py `--step-up`): on a pseudo-terminal it signs in again at the asked level (the
/// password and the code) and retries once; without one it exits 4 and says what to run. The broker's clock is
/// the test's (RequestWorld): codes are computed at its time.
@Suite("broker request follows step-up challenges")
struct StepUpCLITests {
    static let email = "step@example.com"

    /// The code an authenticator app shows for `key` at `time`.
    static func code(_ key: String, at time: Int64) throws -> String {
        TOTP.code(key: try #require(Base32.decode(key)), step: TOTP.step(at: time))
    }

    /// A second factor added to the account through the broker's API (the CLI's session stays the one-factor
    /// sign-in it was): its key.
    static func enrol(_ world: RequestWorld) async throws -> String {
        let started = try await world.onBroker.post(
            "/auth/mfa/totp", json: ["email": .string(email), "password": .string(RequestWorld.password)])
        #expect(started.status == 200, "\(started.json?.serialized() ?? "")")
        let key = try #require(started["key"]?.stringValue)
        let confirmed = try await world.onBroker.post(
            "/auth/mfa/totp/confirm",
            json: [
                "enrolment": .string(try #require(started["enrolment"]?.stringValue)),
                "code": .string(try code(key, at: world.broker.clock.seconds())),
            ])
        #expect(confirmed.status == 201)
        // The next code is another step's.
        try await world.advance(by: 30)
        return key
    }

    @Test func onATerminalItStepsUpAndRetriesWithoutOneItExits4() async throws {
        try await RequestWorld.run(stepUp: ["/api/strong=acr:2", "/api/recent=max_age:600"]) { world in
            try await world.client.register(Self.email)
            let key = try await Self.enrol(world)

            // No terminal: exit 4 with the command, the session kept.
            let scripted = try await world.request([world.api.base + "/api/strong"])
            #expect(scripted.status == 4, "\(scripted.stderr)")
            #expect(scripted.stderr.contains("asks for a sign-in with two factors (acr 2)"), "\(scripted.stderr)")
            #expect(scripted.stderr.contains("broker login --provider custom"), "\(scripted.stderr)")
            #expect(try world.client.cached() != nil, "a step-up does not end the session")
            let noLogin = try await world.request(["--no-login", world.api.base + "/api/strong"])
            #expect(noLogin.status == 4)

            // A terminal: the password and the code, then the same request once more.
            let script: JSONValue = [
                ["Email: ", .string(Self.email)], ["Password: ", .string(RequestWorld.password)],
                ["Code from your authenticator app: ", .string(try Self.code(key, at: world.broker.clock.seconds()))],
            ]
            let result = try await ProcessRunner.run(
                "/usr/bin/env",
                [
                    "python3", TestPaths.interop("pty_session.py"), script.serialized(), "--", BrokerProcess.binary,
                    "request", world.api.base + "/api/strong",
                ],
                environment: world.client.environment)
            let outcome = try #require(JSONValue.parse(Array(result.stdout.utf8)), "\(result.stdout) \(result.stderr)")
            let transcript = outcome["transcript"]?.stringValue ?? ""
            #expect(outcome["status"]?.intValue == 0, "\(transcript)")
            #expect(outcome["unanswered"]?.arrayValue?.isEmpty == true, "\(transcript)")
            #expect(transcript.contains("asks for a sign-in with two factors"), "\(transcript)")
            #expect(transcript.contains(#""acr": "2""#), "the retried request's answer: \(transcript)")
            let statuses = try await world.api.log().filter { $0.path == "/api/strong" }.map(\.status)
            #expect(statuses == [401, 401, 401, 200], "two scripted refusals, then the terminal's: \(statuses)")
            let token = try await world.client.run(["token"])
            let claims = try #require(jwtParts(token.stdout.trimmingCharacters(in: .whitespacesAndNewlines)).claims)
            #expect(claims["acr"] == "2" && claims["amr"] == ["pwd", "otp", "mfa"], "the new session is cached")

            // A call that needs a recent sign-in, when the API judges this one too old: told, exit 4.
            try await world.api.setAuthNow(world.broker.clock.seconds() + 3600)
            let old = try await world.request([world.api.base + "/api/recent"])
            #expect(old.status == 4, "\(old.stderr)")
            #expect(old.stderr.contains("a new sign-in made within the last 600 seconds"), "\(old.stderr)")
            #expect(old.stderr.contains("broker login --provider custom"), "\(old.stderr)")
            try await world.api.setAuthNow(world.broker.clock.seconds())
            #expect(try await world.request([world.api.base + "/api/recent"]).status == 0)
        }
    }

    /// The CLI's account commands meet the broker's own challenge: an account with two factors, a one-factor
    /// session, `broker password change` exits 4 naming the sign-in to make, and nothing changed.
    @Test func theBrokersOwnChallengeIsSaidByTheAccountCommands() async throws {
        try await RequestWorld.run { world in
            try await world.client.register(Self.email)
            _ = try await Self.enrol(world)
            let changed = try await world.client.run(
                ["password", "change", "--password-stdin"],
                stdin: RequestWorld.password + "\n" + "another passphrase 9\n")
            #expect(changed.status == 4, "\(changed.stderr)")
            #expect(changed.stderr.contains("acr 2") && changed.stderr.contains("broker login --provider custom"))
            #expect(try world.client.cached() != nil)
            let login = try await world.onBroker.login(Self.email, RequestWorld.password)
            #expect(login.status == 401 && login.error == "mfa_required", "the password is unchanged")
        }
    }
}
