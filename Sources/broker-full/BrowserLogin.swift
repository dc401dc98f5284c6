import BrokerClient
import BrokerCore

/// `broker login --provider P` for browser providers: ``LoopbackSignIn`` (BrokerClient) does the flow; this
/// prints its progress and maps its outcome to the contract's exit codes.
struct BrowserLogin {
    let provider: ProviderID
    /// The name people know the provider by (its descriptor's).
    let displayName: String
    let settings: ClientSettings
    let api: BrokerAPI
    let noBrowser: Bool
    let timeout: Double

    /// Progress on stderr.
    struct ConsolePresenter: SignInPresenter {
        func note(_ text: String) { Console.note(text) }
        func warning(_ text: String) { Console.warning(text) }
    }

    func run() async throws {
        let signIn = LoopbackSignIn(
            provider: provider, displayName: displayName, settings: settings, api: api, openBrowser: !noBrowser,
            acceptPaste: noBrowser && Terminal.isInteractive, interactive: Terminal.isInteractive,
            timeout: timeout, presenter: ConsolePresenter())
        do {
            let session = try await signIn.run()
            Console.note("Signed in as \(session.userID) (\(settings.key)).")
        } catch {
            switch error {
            case .broker(let api): throw ClientFailure.exit(api, doing: "sign-in")
            case .session(let session): throw ClientFailure.exit(session, settings: settings)
            default: throw CommandFailure(error.description)
            }
        }
    }
}
