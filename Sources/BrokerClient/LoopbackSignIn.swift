package import BrokerCore
import BrokerCrypto
import BrokerSystem
import Glibc
import Synchronization

/// What a loopback sign-in shows a person while it runs; the CLI prints to stderr, tests record.
package protocol SignInPresenter: Sendable {
    /// Progress and instructions.
    func note(_ text: String)
    /// Something went wrong but the sign-in goes on (a wrong paste, no browser could be opened).
    func warning(_ text: String)
}

/// The loopback browser flow from the client's side (RFC 8252 with PKCE; CONTRACT.md "The loopback browser
/// flow"): a listener on 127.0.0.1, the broker's `/auth/{provider}/start` opened in a browser, the answer's
/// `state` and `iss` checked, the one-time code redeemed with the verifier, the session stored.
package struct LoopbackSignIn: Sendable {
    /// Why a sign-in ended without a session; ``ExitStatus/of(_:signingIn:)`` maps each to its exit code.
    package enum Failure: Error, Sendable, CustomStringConvertible {
        /// The broker does not offer the provider.
        case notOffered(String)
        /// Another `broker login` for this broker and profile is waiting for its browser.
        case busy(String)
        /// The listener or the lock could not be set up.
        case local(String)
        /// The answer did not complete a sign-in (wrong state or issuer, the provider said no, no code, timeout).
        case refused(String)
        /// The broker could not be reached or refused to redeem the code.
        case broker(BrokerAPIError)
        /// The session could not be stored.
        case session(SessionError)

        package var description: String {
            switch self {
            case .notOffered(let text), .busy(let text), .local(let text), .refused(let text): text
            case .broker(let error): "sign-in failed: \(error)"
            case .session(let error): error.description
            }
        }
    }

    package let provider: ProviderID
    /// The name people know the provider by.
    package let displayName: String
    package let settings: ClientSettings
    package let api: BrokerAPI
    /// Open a browser (`$BROWSER` or `xdg-open`); otherwise only print the URL.
    package let openBrowser: Bool
    /// Accept the final address pasted on the terminal (SSH sessions) beside the listener.
    package let acceptPaste: Bool
    /// Say how long it waits (a person is watching).
    package let interactive: Bool
    /// Seconds to wait for the browser.
    package let timeout: Double
    package let presenter: any SignInPresenter
    /// `broker link`: the signed-in session's access token. The sign-in then attaches the provider account to
    /// that session's user (through a link ticket) instead of signing in as whoever owns it.
    package let linkingAs: Secret?

    package init(
        provider: ProviderID, displayName: String, settings: ClientSettings, api: BrokerAPI, openBrowser: Bool,
        acceptPaste: Bool, interactive: Bool, timeout: Double, presenter: any SignInPresenter,
        linkingAs: Secret? = nil
    ) {
        self.linkingAs = linkingAs
        self.interactive = interactive
        self.provider = provider
        self.displayName = displayName
        self.settings = settings
        self.api = api
        self.openBrowser = openBrowser
        self.acceptPaste = acceptPaste
        self.timeout = timeout
        self.presenter = presenter
    }

    /// Runs the sign-in to the end and returns the stored session.
    package func run() async throws(Failure) -> Session {
        // Ask first, rather than leave a browser on an error page and the CLI waiting until its timeout.
        let offered: [ProviderInfo]
        do {
            offered = try await api.providers().list
        } catch {
            throw .broker(error)
        }
        guard offered.contains(where: { $0.id == provider.rawValue }) else {
            let names = offered.map(\.id).joined(separator: ", ")
            throw .notOffered("\(displayName) is not enabled on \(settings.key.brokerURL) (it offers: \(names))")
        }
        // One interactive sign-in per broker and profile at a time: never two browser tabs racing for one
        // session. The lock is the kernel's, so a crashed `broker login` does not leave it held.
        let lock = try signInLock()
        defer { lock.unlock() }
        let listener: LoopbackListener
        do {
            listener = try LoopbackListener()
        } catch {
            throw .local("cannot listen for the browser: \(error)")
        }
        let pkce: PKCE
        let state: String
        do {
            pkce = try PKCE.generate()
            state = try SecureRandom.token(byteCount: 16)
        } catch {
            throw .local("no random values for the sign-in: \(error)")
        }
        let redirectURI = "http://127.0.0.1:\(listener.port)/callback"
        var parameters = [
            ("redirect_uri", redirectURI), ("state", state), ("code_challenge", pkce.challenge),
            ("code_challenge_method", "S256"),
        ]
        if let linkingAs {
            do {
                let ticket = try await api.linkTicket(linkingAs, provider: provider, challenge: pkce.challenge)
                parameters.append(("link_ticket", ticket))
            } catch {
                throw .broker(error)
            }
        }
        let url = settings.key.brokerURL + "/auth/\(provider.rawValue)/start?" + FormEncoding.encode(parameters)
        presenter.note(
            linkingAs == nil
                ? "Sign in with \(displayName) in your browser:"
                : "Sign in with the \(displayName) account to link, in your browser:")
        presenter.note("  \(url)")
        if openBrowser, let problem = BrowserOpener.open(url) {
            presenter.warning("could not open a browser (\(problem)); open the URL above")
        }
        if interactive, linkingAs == nil, !BrowserOpener.likely {
            presenter.note(
                "No browser on this machine? broker login --device --provider \(provider.rawValue) signs in from "
                    + "your phone or another computer.")
        }
        if interactive {
            presenter.note("Waiting for the browser (at most \(Int(timeout)) s; Ctrl-C to cancel)…")
        }
        if acceptPaste {
            presenter.note(
                "On another machine? Sign in there, then paste the address the browser ended at (it starts with "
                    + "\(redirectURI)) and press Enter.")
        }
        let arrival: Arrival
        do {
            arrival = try await waitForArrival(listener: listener, redirectURI: redirectURI, state: state)
        } catch let error as LoopbackListener.Failure {
            throw .refused("sign-in \(error)")
        } catch {
            throw .refused("sign-in failed: \(error)")
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
        if let problem = Self.check(query, state: state, brokerURL: settings.key.brokerURL) {
            callback.respond(status: 400, title: "Sign-in failed", message: problem.page)
            throw .refused(problem.message)
        }
        guard let code = query["code"], !code.isEmpty else {
            callback.respond(status: 400, title: "Sign-in failed", message: "The answer carries no code.")
            throw .refused("sign-in failed: the browser's answer carries no code")
        }
        let response: SessionResponse
        do {
            response = try await api.redeem(code: code, verifier: pkce.verifier, redirectURI: redirectURI)
        } catch {
            callback.respond(status: 400, title: "Sign-in failed", message: error.description)
            throw .broker(error)
        }
        do {
            let session = try SessionService(cache: settings.credentials(), api: api, key: settings.key).store(response)
            callback.respond(
                status: 200, title: linkingAs == nil ? "Signed in" : "Linked",
                message: linkingAs == nil
                    ? "Signed in to \(settings.key.brokerURL) as \(session.userID) with \(displayName)."
                    : "\(displayName) now signs in to \(settings.key.brokerURL) as \(session.userID).")
            return session
        } catch {
            callback.respond(status: 400, title: "Sign-in failed", message: "The session could not be saved.")
            throw .session(error)
        }
    }

    /// The answer's `state`, `iss` and `error`, in that order (RFC 9207 before trusting anything else).
    static func check(_ query: [String: String], state: String, brokerURL: String) -> (message: String, page: String)? {
        guard let returnedState = query["state"], ConstantTime.equals(returnedState, state) else {
            return (
                "sign-in failed: the state in the browser's answer is not this sign-in's",
                "The answer does not belong to this sign-in."
            )
        }
        guard query["iss"].flatMap(ClientSettings.normalize) == brokerURL else {
            return (
                "sign-in failed: the answer names issuer \(query["iss"] ?? "(none)"), not \(brokerURL)",
                "The answer came from another broker."
            )
        }
        if let error = query["error"] {
            let description = query["error_description"].flatMap { $0.isEmpty ? nil : $0 } ?? error
            return ("sign-in failed: \(description) (\(error))", description)
        }
        return nil
    }

    /// How the answer arrived: at the listener (a page can be sent back), or pasted on the terminal.
    enum Arrival: Sendable {
        case browser(LoopbackListener.Callback)
        case pasted([String: String])
    }

    /// The first of: the browser reaching the listener, or (with ``acceptPaste``) a pasted final address. Each
    /// waits on a thread of its own and the first answer wins; the loser is abandoned.
    ///
    /// Only a callback carrying this sign-in's `state` counts: one stray request to the port (a wrong or
    /// missing state) is answered 400 and the wait goes on until the timeout.
    func waitForArrival(listener: LoopbackListener, redirectURI: String, state: String) async throws -> Arrival {
        let timeout = self.timeout
        let presenter = self.presenter
        return try await withCheckedThrowingContinuation { continuation in
            let once = Once(continuation)
            DetachedThread.start {
                do {
                    let callback = try listener.waitForCallback(timeout: timeout) { query in
                        query["state"].map { ConstantTime.equals($0, state) } ?? false
                    }
                    once.resume(.success(.browser(callback)))
                } catch {
                    once.resume(.failure(error))
                }
            }
            guard acceptPaste else { return }
            DetachedThread.start {
                while let line = readLine(strippingNewline: true) {
                    let pasted = String(
                        line.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\r" }
                            .reversed())
                    guard pasted.hasPrefix(redirectURI + "?"),
                        let pairs = FormEncoding.decode(String(pasted.dropFirst(redirectURI.count + 1)))
                    else {
                        if !pasted.isEmpty { presenter.warning("that is not an address starting with \(redirectURI)?") }
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
    func signInLock() throws(Failure) -> FileLock {
        do {
            try PosixFile.ensurePrivateDirectory(settings.home)
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in settings.key.brokerURL.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            let path = settings.home + "/login-\(settings.key.profile)-\(String(hash, radix: 16)).lock"
            guard let lock = try FileLock.attempt(path: path) else {
                throw Failure.busy(
                    "another broker login for \(settings.key) is waiting for its browser; finish or cancel it first")
            }
            return lock
        } catch let failure as Failure {
            throw failure
        } catch {
            throw .local("cannot take the sign-in lock: \(error)")
        }
    }
}

/// Opens a URL in the person's browser: `$BROWSER URL` (through `/bin/sh`, the URL passed as an argument,
/// never spliced into the command line) or `xdg-open URL`, detached, its output discarded.
package enum BrowserOpener {
    /// Whether a browser can plausibly be opened here: `$BROWSER`, or a display with `xdg-open` installed.
    package static var likely: Bool {
        let environment = ClientSettings.processEnvironment
        if let browser = environment["BROWSER"], !browser.isEmpty { return true }
        let display = [environment["DISPLAY"], environment["WAYLAND_DISPLAY"]].contains { !($0 ?? "").isEmpty }
        guard display else { return false }
        let path = environment["PATH"] ?? "/usr/bin:/bin"
        return path.split(separator: ":").contains { access("\($0)/xdg-open", X_OK) == 0 }
    }

    /// Starts the browser; the reason when it could not be started (the URL is printed anyway).
    package static func open(_ url: String) -> String? {
        let environment = ClientSettings.processEnvironment
        let arguments: [String]
        if let browser = environment["BROWSER"], !browser.isEmpty {
            arguments = ["/bin/sh", "-c", browser + " \"$1\"", "broker-browser", url]
        } else {
            arguments = ["/usr/bin/env", "xdg-open", url]
        }
        // The browser (xdg-open's, often long-lived) inherits no descriptor of ours: not the loopback listener,
        // which would otherwise stay bound after this command ends. Its exit is reaped by a thread of its own.
        do {
            _ = try ChildProcess(
                arguments[0], Array(arguments.dropFirst()), stdin: .null, stdout: .null, stderr: .null)
            return nil
        } catch {
            return error.description
        }
    }
}

/// No page to send: the address was pasted on the terminal.
struct Silent: LoopbackListener.Answerable {
    func respond(status: Int, title: String, message: String) {}
}

/// Resumes a continuation once, whichever thread comes first.
final class Once: Sendable {
    private let continuation: Mutex<CheckedContinuation<LoopbackSignIn.Arrival, any Error>?>

    init(_ continuation: CheckedContinuation<LoopbackSignIn.Arrival, any Error>) {
        self.continuation = Mutex(continuation)
    }

    func resume(_ result: Result<LoopbackSignIn.Arrival, any Error>) {
        continuation.withLock { pending in
            pending?.resume(with: result)
            pending = nil
        }
    }
}
