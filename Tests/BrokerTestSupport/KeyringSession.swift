import BrokerSystem
import BrokerTesting
import Foundation
import Glibc

/// A desktop keyring of a test's own on a private session bus: Debian's gnome-keyring-daemon, unlocked, with
/// Python `secretstorage` to read, lock, unlock, pause or stop it (Tests/Interop/keyring_session.py); or
/// (``startFake()``) a Secret Service of the tests' own whose unlock prompt the test accepts or dismisses when it
/// chooses, and which can refuse writes (Tests/Interop/fake_secret_service.py) — what gnome-keyring cannot be
/// made to do without a display.
package final class KeyringSession: @unchecked Sendable {
    let script: ScriptServer
    /// The bus's address (`DBUS_SESSION_BUS_ADDRESS`).
    package let address: String
    package let directory: String

    private init(script: ScriptServer, directory: String) {
        self.script = script
        self.directory = directory
        address = script.ready
    }

    package static func start() async throws -> KeyringSession {
        try await start(script: "keyring_session.py")
    }

    package static func startFake() async throws -> KeyringSession {
        try await start(script: "fake_secret_service.py")
    }

    static func start(script name: String) async throws -> KeyringSession {
        let directory = try TemporaryDirectory.make(prefix: "keyring")
        let script = try await offThread {
            try ScriptServer(TestPaths.interop(name), [directory.path], prefix: "ready ")
        }
        return KeyringSession(script: script, directory: directory.path)
    }

    /// The fake's record of the Secret Service methods called so far, in order.
    package func calls() async throws -> [String] {
        let answer = try await command("calls")
        guard let list = try JSONSerialization.jsonObject(with: Data(answer.utf8)) as? [String] else {
            throw ServerTestError("fake_secret_service.py: calls: \(answer)")
        }
        return list
    }

    /// What a process needs to find this keyring (and no other).
    package var environment: [String: String] { ["DBUS_SESSION_BUS_ADDRESS": address, "XDG_RUNTIME_DIR": ""] }

    /// Sends one command (see the script) and returns its one-line answer; throws on "error: …".
    @discardableResult
    package func command(_ line: String) async throws -> String {
        guard let input = script.process.input else { throw ServerTestError("the keyring session has ended") }
        let bytes = Array((line + "\n").utf8)
        guard bytes.withUnsafeBytes({ write(input, $0.baseAddress, $0.count) }) == bytes.count else {
            throw ServerTestError("keyring_session.py: cannot write \(line)")
        }
        let script = script
        let answer = try await offThread { script.nextLine(timeout: .seconds(60)) }
        guard let answer else { throw ServerTestError("keyring_session.py: no answer to \(line)") }
        if answer.hasPrefix("error:") { throw ServerTestError("keyring_session.py: \(line): \(answer)") }
        return answer
    }

    /// Every item of the default collection as secretstorage reads it: label, attributes, secret (as text).
    package func items() async throws -> [(label: String, attributes: [String: String], secret: String)] {
        let answer = try await command("items")
        guard let list = try JSONSerialization.jsonObject(with: Data(answer.utf8)) as? [[String: Any]] else {
            throw ServerTestError("keyring_session.py: items: \(answer)")
        }
        return list.map {
            (
                $0["label"] as? String ?? "", $0["attributes"] as? [String: String] ?? [:],
                $0["secret"] as? String ?? ""
            )
        }
    }

    package func close() { script.close() }

    deinit { script.close() }
}
