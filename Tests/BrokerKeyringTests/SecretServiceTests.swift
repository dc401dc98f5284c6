import BrokerKeyring
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// Our Secret Service client against Debian's gnome-keyring-daemon on a private session bus, with Python
/// secretstorage as the independent reader: storing, reading, replacing, deleting; and the failures a person
/// meets — a locked keyring (refused at once, never a prompt), a daemon that stops answering mid-call (the
/// deadline ends the call), a daemon gone, no bus at all.
@Suite("Secret Service client against gnome-keyring")
struct SecretServiceTests {
    static func open(_ keyring: KeyringSession, seconds: Int64 = 10) async throws -> SecretService {
        let environment = keyring.environment
        return try await offThread {
            try SecretService(environment: environment, deadline: .now + .seconds(seconds))
        }
    }

    static let attributes = [("service", "broker"), ("broker", "http://127.0.0.1:8787"), ("profile", "default")]

    @Test func itemsAreStoredFoundReplacedAndDeleted() async throws {
        let keyring = try await KeyringSession.start()
        defer { keyring.close() }
        let service = try await Self.open(keyring)
        let (collection, found, secret) = try await offThread {
            let collection = try service.unlockedDefaultCollection(interactive: false)
            #expect(try service.items(in: collection, attributes: Self.attributes).isEmpty)
            try service.store(
                Array("first\u{0}secret".utf8), label: "broker test", attributes: Self.attributes, in: collection)
            try service.store(Array("second".utf8), label: "broker test", attributes: Self.attributes, in: collection)
            let found = try service.items(in: collection, attributes: Self.attributes)
            return (collection, found, try found.first.map { try service.secret(of: $0) })
        }
        #expect(found.count == 1, "the same attributes replace the item")
        #expect(secret == Array("second".utf8))
        let seen = try await keyring.items()
        #expect(seen.count == 1 && seen[0].secret == "second" && seen[0].label == "broker test")
        #expect(seen[0].attributes["profile"] == "default" && seen[0].attributes["service"] == "broker")
        try await keyring.command(
            #"store {"label":"theirs","attributes":{"service":"broker","profile":"p2"},"secret":"x"}"#)
        try await offThread {
            #expect(
                try service.items(in: collection, attributes: [("service", "broker"), ("profile", "other")]).isEmpty)
            let theirs = try service.items(in: collection, attributes: [("service", "broker"), ("profile", "p2")])
            #expect(
                try theirs.map { try service.secret(of: $0) } == [Array("x".utf8)], "what secretstorage stored we read")
            try service.delete(found[0])
            #expect(try service.items(in: collection, attributes: Self.attributes).isEmpty)
        }
        #expect(try await keyring.items().map(\.label) == ["theirs"])
    }

    @Test func aLockedKeyringIsRefusedAtOnceWithoutAPrompt() async throws {
        let keyring = try await KeyringSession.start()
        defer { keyring.close() }
        try await keyring.command("lock")
        let service = try await Self.open(keyring)
        await #expect(throws: SecretService.Failure.locked, "an answer, not a wait for a prompt") {
            _ = try await offThread { try service.unlockedDefaultCollection(interactive: false) }
        }
        try await keyring.command("unlock")
        #expect(
            try await offThread { try service.unlockedDefaultCollection(interactive: false) }
                .hasPrefix("/org/freedesktop/secrets"))
    }

    /// The daemon stops answering in the middle (SIGSTOP): the call ends at the deadline.
    @Test func aDaemonThatStopsAnsweringCostsOnlyTheDeadline() async throws {
        let keyring = try await KeyringSession.start()
        defer { keyring.close() }
        let service = try await Self.open(keyring, seconds: 20)
        let collection = try await offThread { try service.unlockedDefaultCollection(interactive: false) }
        try await keyring.command("pause")
        // A service opened with a short deadline meets the paused daemon at its first call: the deadline ends it.
        let failure = await #expect(throws: SecretService.Failure.self) {
            _ = try await offThread {
                let late = try SecretService(environment: keyring.environment, deadline: .now + .seconds(1))
                return try late.items(in: collection, attributes: Self.attributes)
            }
        }
        #expect("\(String(describing: failure))".contains("no answer in time"), "\(String(describing: failure))")
        try await keyring.command("resume")
    }

    @Test func aStoppedDaemonOrNoBusIsUnavailable() async throws {
        let keyring = try await KeyringSession.start()
        defer { keyring.close() }
        try await keyring.command("stop")
        let environment = keyring.environment
        let stopped = await #expect(throws: SecretService.Failure.self) {
            _ = try await offThread { try SecretService(environment: environment, deadline: .now + .seconds(5)) }
        }
        if case .unavailable(let reason)? = stopped {
            #expect(reason.contains("no Secret Service"), "\(reason)")
        } else {
            Issue.record("expected unavailable, got \(String(describing: stopped))")
        }
        await #expect(throws: SecretService.Failure.self) {
            _ = try await offThread { try SecretService(environment: [:], deadline: .now + .seconds(5)) }
        }
        let nowhere = ["DBUS_SESSION_BUS_ADDRESS": "unix:path=\(keyring.directory)/no-such-bus"]
        await #expect(throws: SecretService.Failure.self) {
            _ = try await offThread { try SecretService(environment: nowhere, deadline: .now + .seconds(5)) }
        }
    }
}
