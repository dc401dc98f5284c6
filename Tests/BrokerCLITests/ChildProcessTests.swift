import BrokerSystem
import BrokerTesting
import Foundation
import Glibc
import Testing

@Suite("child processes (posix_spawn, reaped on a thread of their own)")
struct ChildProcessTests {
    @Test("a child inherits no descriptor but its three streams")
    func inheritsNothing() async throws {
        let directory = try TemporaryDirectory.make(prefix: "broker-child")
        defer { try? FileManager.default.removeItem(at: directory) }
        // A descriptor of ours without close-on-exec: what a socket of a concurrent spawn looks like.
        let marker = directory.appendingPathComponent("held-open").path
        let held = open(marker, O_WRONLY | O_CREAT, 0o600)
        #expect(held > 2)
        defer { close(held) }
        let listing = try ChildProcess("/bin/ls", ["-l", "/proc/self/fd"], stdout: .pipe)
        let text = String(decoding: listing.readOutputToEnd(), as: UTF8.self)
        let ended = try await offThread { listing.waitUntilExit() }
        #expect(ended == ChildProcess.Termination(status: 0, signaled: false))
        #expect(text.contains("/proc/") || text.contains("pipe:"), "the listing came through the pipe: \(text)")
        #expect(!text.contains(marker), "\(text)")
        // ls itself holds 0, 1, 2 and the directory it reads; nothing else.
        let descriptors = text.split(separator: "\n").filter { $0.contains(" -> ") }
        #expect(descriptors.count >= 3 && descriptors.count <= 4, "\(text)")
    }

    @Test("exit codes, signals, a time limit, and no signal after the child is reaped")
    func endings() async throws {
        let code = try ChildProcess("/bin/sh", ["-c", "exit 3"])
        #expect(try await offThread { code.waitUntilExit() } == ChildProcess.Termination(status: 3, signaled: false))
        #expect(!code.isRunning)
        code.send(SIGKILL)  // reaped: nothing is sent to a pid that may be another process's now

        let sleeper = try ChildProcess("/bin/sleep", ["600"])
        #expect(sleeper.isRunning)
        #expect(sleeper.waitUntilExit(timeout: .milliseconds(1)) == nil, "a time limit returns without an exit")
        sleeper.send(SIGTERM)
        #expect(try await offThread { sleeper.waitUntilExit() } == ChildProcess.Termination(status: 15, signaled: true))
        #expect(sleeper.termination?.signaled == true)
    }

    @Test("stdin from a pipe, the environment and the working directory as given")
    func inputEnvironmentDirectory() async throws {
        let directory = try TemporaryDirectory.make(prefix: "broker-child")
        defer { try? FileManager.default.removeItem(at: directory) }
        let child = try ChildProcess(
            "sh", ["-c", #"read line; printf '%s %s %s\n' "$line" "$GREETING" "$(pwd)""#],
            environment: ["GREETING": "hello", "PATH": "/usr/bin:/bin"], directory: directory.path, stdin: .pipe,
            stdout: .pipe)
        let input = try #require(child.input)
        #expect(write(input, "typed\n", 6) == 6)
        child.closeInput()
        let line = try await offThread { child.readOutputLine() }
        let real = try #require(realpath(directory.path, nil))
        defer { free(real) }
        #expect(line == "typed hello \(String(cString: real))")
        #expect(try await offThread { child.waitUntilExit() }?.status == 0)
    }

    @Test("a program that is not there is an error that names it, not a child")
    func missingProgram() {
        #expect(throws: ChildProcess.Failure.self) {
            try ChildProcess("/nonexistent/broker-missing", [])
        }
        do {
            _ = try ChildProcess("broker-missing-program", [])
        } catch {
            #expect(error.description.contains("broker-missing-program"))
        }
    }
}
