import BrokerCore
import BrokerStore
import Logging

/// What every way of linking shares (`broker link` through the browser flow, the device flow's link): why an
/// identity cannot be attached, in words for the person linking, and the attachment itself.
extension ContextualService {
    /// Why `identity` cannot be attached to `user`, in words for the person linking; `nil` when it can (or is
    /// attached to them already). The store decides again, atomically, when the code is redeemed.
    func linkProblem(_ identity: IdentityRecord, to user: UserID) async throws -> (reason: String, message: String)? {
        let name = displayName(identity.provider)
        if let owner = try await store.identityOwner(provider: identity.provider, subject: identity.subject) {
            return owner == user ? nil : ("owned_by_another_user", LinkMessages.owned(name))
        }
        if identity.derivedUserID != user, try await store.user(id: identity.derivedUserID) != nil {
            return ("owned_by_another_user", LinkMessages.owned(name))
        }
        if let taken = try await store.identities(user: user).first(where: {
            $0.identity.provider == identity.provider
        }) {
            return (
                "provider_taken",
                LinkMessages.providerTaken(name, provider: identity.provider, subject: taken.identity.subject)
            )
        }
        return nil
    }

    /// Attaches the provider account a `broker link` sign-in vouched for, now that the CLI that asked for the
    /// link has shown its verifier.
    func attachLinked(_ identity: IdentityRecord, to user: UserRecord) async throws {
        let name = displayName(identity.provider)
        let outcome = try await store.linkIdentity(identity, to: user.id, now: now)
        metrics.link(provider: identity.provider.rawValue, outcome: outcome.label)
        switch outcome {
        case .linked:
            audit.record("linked", user: user.id, fields: ["provider": identity.provider.rawValue])
            logger.info(
                "identity linked", metadata: ["broker.user": "\(user.id)", "broker.provider": "\(identity.provider)"])
        case .alreadyLinked:
            break
        case .ownedByAnotherUser:
            audit.record(
                "linked", outcome: "failure", user: user.id,
                fields: ["provider": identity.provider.rawValue, "reason": "owned_by_another_user"])
            throw APIError(status: 403, code: .accessDenied, detail: LinkMessages.owned(name))
        case .providerTaken(let subject):
            audit.record(
                "linked", outcome: "failure", user: user.id,
                fields: ["provider": identity.provider.rawValue, "reason": "provider_taken"])
            throw APIError(
                status: 403, code: .accessDenied,
                detail: LinkMessages.providerTaken(name, provider: identity.provider, subject: subject))
        case .userMissing:
            throw APIError.invalidGrant("the account of this code no longer exists")
        }
    }
}

/// The words of a refused link, the same in the browser, the device flow and the CLI.
enum LinkMessages {
    static func owned(_ name: String) -> String {
        "this \(name) account already signs in as another broker user; sign in with it and delete that user "
            + "(broker account delete) or unlink it there, then link again"
    }

    static func providerTaken(_ name: String, provider: ProviderID, subject: String) -> String {
        "another \(name) account (\(subject)) is linked to this user; unlink it first "
            + "(broker unlink --provider \(provider.rawValue))"
    }
}

extension LinkOutcome {
    /// The outcome as a metrics label.
    var label: String {
        switch self {
        case .linked: "linked"
        case .alreadyLinked: "already_linked"
        case .ownedByAnotherUser: "owned_by_another_user"
        case .providerTaken: "provider_taken"
        case .userMissing: "user_missing"
        }
    }
}
