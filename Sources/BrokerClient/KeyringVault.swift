package import BrokerCore
package import BrokerKeyring
import Synchronization

/// A profile's long-lived secrets in the desktop keyring (issue "Keyring"): one Secret Service item per
/// secret, found by its attributes `service=broker`, `broker=<URL>`, `profile=<name>`, `home=<BROKER_HOME>`,
/// `kind=<what>` — the home too, so two `BROKER_HOME`s of one person (a second setup, a test) never read or
/// replace each other's secrets.
///
/// Opened once per command, lazily; every call ends by a deadline — two seconds for commands that must never
/// wait on a person (`token`, `request`, `exec`, the credential helpers), longer only for `broker login` on a
/// terminal, which may show the desktop's unlock prompt.
package final class KeyringVault: Sendable {
    /// What a secret is.
    package enum Kind: String, Sendable {
        case refreshToken = "refresh_token"
        case dpopKey = "dpop_key"

        var shown: String {
            switch self {
            case .refreshToken: "refresh token"
            case .dpopKey: "DPoP key"
            }
        }
    }

    let environment: [String: String]
    /// The `BROKER_HOME` whose sessions these secrets belong to.
    let home: String
    let interactive: Bool
    let budget: Duration
    private let opened = Mutex<Result<(SecretService, String), SecretService.Failure>?>(nil)

    /// The wait allowed a command that must not wait on a person: to open the keyring and learn whether it is
    /// locked. (Reading and writing items, once it is open, have ``SecretService``'s own per-call limit.)
    package static let quickBudget: Duration = .seconds(2)
    /// `broker login` and `register` without a terminal: a sign-in takes seconds anyway, and a busy machine
    /// must not cost the session it just made.
    package static let signInBudget: Duration = .seconds(30)
    /// `broker login` and `register` on a terminal: the desktop's unlock prompt, answered by a person.
    package static let promptBudget: Duration = .seconds(120)

    package init(
        environment: [String: String], home: String, interactive: Bool = false, budget: Duration = quickBudget
    ) {
        self.environment = environment
        self.home = home
        self.interactive = interactive
        self.budget = budget
    }

    /// The service and its unlocked default collection, opened at the first use (a failure is remembered: one
    /// command asks once).
    func open() throws(SecretService.Failure) -> (SecretService, String) {
        let result = opened.withLock { (state: inout Result<(SecretService, String), SecretService.Failure>?) in
            if let state { return state }
            let made: Result<(SecretService, String), SecretService.Failure>
            do throws(SecretService.Failure) {
                let service = try SecretService(environment: environment, deadline: .now + budget)
                made = .success((service, try service.unlockedDefaultCollection(interactive: interactive)))
            } catch {
                made = .failure(error)
            }
            state = made
            return made
        }
        return try result.get()
    }

    /// Whether the keyring answers and is unlocked (for `auto`), and why not.
    package func availability() -> SecretService.Failure? {
        do {
            _ = try open()
            return nil
        } catch {
            return error
        }
    }

    func attributes(_ kind: Kind, _ key: SessionKey) -> [(String, String)] {
        [
            ("service", "broker"), ("broker", key.brokerURL), ("profile", key.profile), ("home", home),
            ("kind", kind.rawValue),
        ]
    }

    package func read(_ kind: Kind, for key: SessionKey) throws(SecretService.Failure) -> [UInt8]? {
        let (service, collection) = try open()
        guard let item = try service.items(in: collection, attributes: attributes(kind, key)).first else {
            return nil
        }
        return try service.secret(of: item)
    }

    package func write(_ secret: [UInt8], _ kind: Kind, for key: SessionKey) throws(SecretService.Failure) {
        let (service, collection) = try open()
        try service.store(
            secret, label: "broker \(kind.shown) (profile \(key.profile) at \(key.brokerURL))",
            attributes: attributes(kind, key), in: collection)
    }

    /// Removes the item (and any duplicates another client made with the same attributes).
    package func delete(_ kind: Kind, for key: SessionKey) throws(SecretService.Failure) {
        let (service, collection) = try open()
        for item in try service.items(in: collection, attributes: attributes(kind, key)) {
            try service.delete(item)
        }
    }

    /// What to tell a person whose keyring failed, and what to do about it.
    package static func advice(_ failure: SecretService.Failure, key: SessionKey) -> String {
        switch failure {
        case .locked:
            "the desktop keyring holding the session's secrets (\(key)) is locked; unlock it (sign in to the "
                + "desktop, or open its keyring app), or run broker login on a terminal"
        case .noDefaultCollection:
            "the desktop keyring has no default collection; create one (its keyring app), or set "
                + "\"credential_store\": \"file\" in the client config"
        case .unavailable(let reason), .failed(let reason):
            "the desktop keyring holding the session's secrets (\(key)) cannot be used: \(reason); start it, "
                + "or sign in again with BROKER_CREDENTIAL_STORE=file"
        }
    }
}
