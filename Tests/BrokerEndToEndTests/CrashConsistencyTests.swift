import BrokerCore
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// What the storm saw: the emails whose registration was answered 201, and each refresh chain's token with
/// whether the request that produced (or last presented) it was answered.
private actor Storm {
    var registered: [String] = []
    var chains: [String]
    /// A chain whose last request got no answer (the broker died under it): its token may or may not be spent.
    var unanswered: Set<Int> = []
    var answers = 0

    init(chains: [String]) { self.chains = chains }

    func registeredOne(_ email: String) {
        registered.append(email)
        answers += 1
    }
    func rotated(_ chain: Int, to token: String) {
        chains[chain] = token
        answers += 1
    }
    func lostAnswer(_ chain: Int) { unanswered.insert(chain) }
    func replace(_ chain: Int, with token: String) {
        chains[chain] = token
        unanswered.remove(chain)
    }
    func settle() { unanswered.removeAll() }
}

extension LoadTests {
    static let stormConfig = #"{"server": {"registrations_per_hour": 100000}}"#

    /// `kill -9` of `broker serve` (SQLite) at random moments of a registration and refresh storm, 50 times.
    /// After each restart: the store passes SQLite's integrity and foreign-key checks, no session has two live
    /// refresh tokens, every registration answered 201 is there, and every rotation answered 200 left its new
    /// token live; a rotation that got no answer either happened or did not, never half.
    @Test func killNineDuringAStormFiftyTimes() async throws {
        var server = try await BrokerProcess.start(config: Self.stormConfig)
        defer { server.stop(signal: SIGKILL) }
        let directory = server.directory
        let database = server.dataDirectory + "/broker.sqlite3"
        #expect(try await server.register("storm@example.com", Self.password).status == 201)
        func newChain(_ server: BrokerProcess) async throws -> String {
            let session = try await server.login("storm@example.com", Self.password)
            return try #require(session["refresh_token"]?.stringValue, "\(session.status)")
        }
        var initial: [String] = []
        for _ in 0..<4 { initial.append(try await newChain(server)) }
        let storm = Storm(chains: initial)
        var killedMidAnswer = 0

        for round in 0..<50 {
            let target = server
            let answeredBefore = await storm.answers
            let work = Task {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for worker in 0..<2 {
                        group.addTask {
                            var index = 0
                            while true {
                                let email = "r\(round)-w\(worker)-\(index)@example.com"
                                index += 1
                                guard
                                    let reply = try? await target.post(
                                        "/auth/register",
                                        json: [
                                            "email": .string(email), "password": .string(Self.password),
                                        ])
                                else { return }
                                if reply.status == 201 { await storm.registeredOne(email) }
                            }
                        }
                    }
                    for chain in 0..<4 {
                        group.addTask {
                            while true {
                                let token = await storm.chains[chain]
                                guard
                                    let reply = try? await target.form(
                                        "/auth/token", [("grant_type", "refresh_token"), ("refresh_token", token)])
                                else {
                                    await storm.lostAnswer(chain)
                                    return
                                }
                                guard reply.status == 200, let next = reply["refresh_token"]?.stringValue else {
                                    Issue.record(
                                        "round \(round) chain \(chain): \(reply.status) \(String(describing: reply.json))"
                                    )
                                    return
                                }
                                await storm.rotated(chain, to: next)
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            }
            // A random moment once the storm is under way (answers are arriving); every other round only after
            // a registration was answered, so that registrations are part of what is checked however slow the
            // machine is (each costs a scrypt hash).
            let registeredBefore = await storm.registered.count
            while true {
                let answers = await storm.answers
                let registeredNow = await storm.registered.count
                if answers >= answeredBefore + 2 && (round % 2 == 1 || registeredNow > registeredBefore) { break }
                try await Task.sleep(for: .milliseconds(5))
            }
            try await Task.sleep(for: .milliseconds(Int.random(in: 0...1500)))
            _ = try await server.terminate(signal: SIGKILL)
            try await work.value

            server = try await BrokerProcess.start(config: Self.stormConfig, directory: directory)
            let chains = await storm.chains
            let unanswered = await storm.unanswered
            let emails = await storm.registered
            let report = try await SQLiteInspection.read(database, tokens: chains, emails: Array(emails))
            #expect(report.integrity == "ok", "round \(round): \(report)")
            #expect(report.foreignKeyErrors == 0, "round \(round)")
            #expect(report.doubleLive == 0, "round \(round): a session has two live refresh tokens")
            #expect(report.missingEmails.isEmpty, "round \(round): an answered 201 was lost")
            for (chain, token) in chains.enumerated() {
                let state = report.tokens[token]
                if unanswered.contains(chain) {
                    // The kill landed during this rotation: it committed (the token is spent and its successor,
                    // never delivered, is live) or it did not (the token is still live). Either way, one live token.
                    #expect(state == "live" || state == "used", "round \(round) chain \(chain): \(state ?? "?")")
                    if state == "used" {
                        killedMidAnswer += 1
                        await storm.replace(chain, with: try await newChain(server))
                    }
                } else {
                    #expect(
                        state == "live",
                        "round \(round) chain \(chain): an answered rotation was lost (\(state ?? "?"))")
                }
            }
            await storm.settle()
        }
        let registered = await storm.registered.count
        #expect(registered >= 25, "the storm registered accounts (\(registered))")
        // Reported, not required: how often the kill fell between a commit and its answer.
        print("kill -9 storm: \(registered) registrations, \(killedMidAnswer) rotations committed but unanswered")
    }
}
