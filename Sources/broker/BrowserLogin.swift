import BrokerClient
import BrokerCore
import BrokerCrypto
import BrokerSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// `broker login --provider P` for browser providers (CONTRACT.md "The loopback browser flow").
struct BrowserLogin {
    let provider: ProviderID
    /// The name people know the provider by (its descriptor's).
    let displayName: String
    let settings: ClientSettings
    let api: BrokerAPI
    let noBrowser: Bool
    let timeout: Double

    func run() async throws {
        // Ask first, rather than leave a browser on an error page and the CLI waiting until its timeout.
        let offered: [ProviderInfo]
        do {
            offered = try await api.providers().list
        } catch {
            throw ClientFailure.exit(error, doing: "sign-in")
        }
        guard offered.contains(where: { $0.id == provider.rawValue }) else {
            let names = offered.map(\.id).joined(separator: ", ")
            throw Console.fail(
                "\(displayName) is not enabled on \(settings.key.brokerURL) (it offers: \(names))")
        }
        // One interactive sign-in per broker and profile at a time: never two browser tabs racing for one
        // session. The lock is the kernel's, so a crashed `broker login` does not leave it held.
        let lock = try signInLock()
        defer { lock.unlock() }
        let listener: LoopbackListener
        do {
            listener = try LoopbackListener()
        } catch {
            throw Console.fail("cannot listen for the browser: \(error)")
        }
        let pkce = try PKCE.generate()
        let state = try SecureRandom.token(byteCount: 16)
        let redirectURI = "http://127.0.0.1:\(listener.port)/callback"
        let url =
            settings.key.brokerURL + "/auth/\(provider.rawValue)/start?"
            + FormEncoding.encode([
                ("redirect_uri", redirectURI), ("state", state), ("code_challenge", pkce.challenge),
                ("code_challenge_method", "S256"),
            ])
        Console.note("Sign in with \(displayName) in your browser:")
        Console.note("  \(url)")
        if !noBrowser { openBrowser(url) }
        if Terminal.isInteractive {
            Console.note("Waiting for the browser (at most \(Int(timeout)) s; Ctrl-C to cancel)…")
        }

        let pasteAllowed = noBrowser && Terminal.isInteractive
        if pasteAllowed {
            Console.note(
                "On another machine? Sign in there, then paste the address the browser ended at (it starts with "
                    + "\(redirectURI)) and press Enter.")
        }
        let arrival: Arrival
        do {
            arrival = try await waitForArrival(listener: listener, redirectURI: redirectURI, paste: pasteAllowed)
        } catch let error as LoopbackListener.Failure {
            throw Console.fail("sign-in \(error)")
        }
        let callback: any LoopbackListener.Answerable
        let query: [String: String]
        switch arrival {
        case .browser(let reached):
            callback = reached
            query = reached.query
        case .pasted(let pasted):
            callback = Silent()
            query = pasted
        }
        guard let returnedState = query["state"], ConstantTime.equals(returnedState, state) else {
            callback.respond(
                status: 400, title: "Sign-in failed", message: "The answer does not belong to this sign-in.")
            throw Console.fail("sign-in failed: the state in the browser's answer is not this sign-in's")
        }
        guard query["iss"].flatMap(ClientSettings.normalize) == settings.key.brokerURL else {
            callback.respond(status: 400, title: "Sign-in failed", message: "The answer came from another broker.")
            throw Console.fail(
                "sign-in failed: the answer names issuer \(query["iss"] ?? "(none)"), not \(settings.key.brokerURL)")
        }
        if let error = query["error"] {
            let description = query["error_description"].flatMap { $0.isEmpty ? nil : $0 } ?? error
            callback.respond(status: 400, title: "Sign-in failed", message: description)
            throw Console.fail("sign-in failed: \(description) (\(error))")
        }
        guard let code = query["code"], !code.isEmpty else {
            callback.respond(status: 400, title: "Sign-in failed", message: "The answer carries no code.")
            throw Console.fail("sign-in failed: the browser's answer carries no code")
        }
        let response: SessionResponse
        do {
            response = try await api.redeem(code: code, verifier: pkce.verifier, redirectURI: redirectURI)
        } catch {
            callback.respond(status: 400, title: "Sign-in failed", message: error.description)
            throw ClientFailure.exit(error, doing: "sign-in")
        }
        let service = SessionService(cache: settings.cache, api: api, key: settings.key)
        do {
            let session = try service.store(response)
            callback.respond(
                status: 200, title: "Signed in",
                message: "Signed in to \(settings.key.brokerURL) as \(session.userID) with \(displayName).")
            Console.note("Signed in as \(session.userID) (\(settings.key)).")
        } catch {
            callback.respond(status: 400, title: "Sign-in failed", message: "The session could not be saved.")
            throw ClientFailure.exit(error, settings: settings)
        }
    }

    /// How the answer arrived: at the listener (a page can be sent back), or pasted on the terminal.
    enum Arrival: Sendable {
        case browser(LoopbackListener.Callback)
        case pasted([String: String])
    }

    /// The first of: the browser reaching the listener, or (with `paste`) a pasted final address. Each waits
    /// on a thread of its own and the first answer wins; the loser is abandoned (the command ends soon after).
    func waitForArrival(listener: LoopbackListener, redirectURI: String, paste: Bool) async throws -> Arrival {
        let timeout = self.timeout
        guard paste else { return .browser(try await offThread { try listener.waitForCallback(timeout: timeout) }) }
        return try await withCheckedThrowingContinuation { continuation in
            let once = Once(continuation)
            DetachedThread.start {
                do {
                    once.resume(.success(.browser(try listener.waitForCallback(timeout: timeout))))
                } catch {
                    once.resume(.failure(error))
                }
            }
            DetachedThread.start {
                while let line = readLine(strippingNewline: true) {
                    let pasted = String(
                        line.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\r" }
                            .reversed())
                    guard pasted.hasPrefix(redirectURI + "?"),
                        let pairs = FormEncoding.decode(String(pasted.dropFirst(redirectURI.count + 1)))
                    else {
                        if !pasted.isEmpty { Console.warning("that is not an address starting with \(redirectURI)?") }
                        continue
                    }
                    var query: [String: String] = [:]
                    for (name, value) in pairs where query[name] == nil { query[name] = value }
                    once.resume(.success(.pasted(query)))
                    return
                }
            }
        }
    }

    /// The per-broker, per-profile sign-in lock in `BROKER_HOME`.
    func signInLock() throws -> FileLock {
        do {
            try PosixFile.ensurePrivateDirectory(settings.home)
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in settings.key.brokerURL.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            let path = settings.home + "/login-\(settings.key.profile)-\(String(hash, radix: 16)).lock"
            guard let lock = try FileLock.attempt(path: path) else {
                throw Console.fail(
                    "another broker login for \(settings.key) is waiting for its browser; finish or cancel it first")
            }
            return lock
        } catch let failure as PosixFile.Failure {
            throw Console.fail("cannot take the sign-in lock: \(failure)")
        }
    }

    /// `$BROWSER URL` (through `/bin/sh`, the URL passed as an argument, never spliced into the command
    /// line) or `xdg-open URL`, detached, its output discarded. Failing to open is not fatal: the URL is
    /// on stderr.
    func openBrowser(_ url: String) {
        let environment = ClientSettings.processEnvironment
        let arguments: [String]
        if let browser = environment["BROWSER"], !browser.isEmpty {
            arguments = ["/bin/sh", "-c", browser + " \"$1\"", "broker-browser", url]
        } else {
            arguments = ["/usr/bin/env", "xdg-open", url]
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0)
        var cArguments = arguments.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        var pid = pid_t()
        let spawned = posix_spawn(&pid, arguments[0], &actions, nil, &cArguments, environ)
        if spawned != 0 {
            Console.warning("could not open a browser (\(String(cString: strerror(spawned)))); open the URL above")
        }
    }
}

/// Runs blocking work on a thread of its own, never on Swift's cooperative pool.
func offThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DetachedThread.start {
            do {
                continuation.resume(returning: try body())
            } catch {
                continuation.resume(throwing: error)
            }
        }
    }
}

/// No page to send: the address was pasted on the terminal.
struct Silent: LoopbackListener.Answerable {
    func respond(status: Int, title: String, message: String) {}
}

/// Resumes a continuation once, whichever thread comes first.
final class Once: Sendable {
    private let continuation: Mutex<CheckedContinuation<BrowserLogin.Arrival, any Error>?>

    init(_ continuation: CheckedContinuation<BrowserLogin.Arrival, any Error>) {
        self.continuation = Mutex(continuation)
    }

    func resume(_ result: Result<BrowserLogin.Arrival, any Error>) {
        continuation.withLock { pending in
            pending?.resume(with: result)
            pending = nil
        }
    }
}
