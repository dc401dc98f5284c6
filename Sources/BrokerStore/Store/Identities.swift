package import BrokerCore

/// A provider account as the provider described it: who it is (`provider`, `subject`) and what it said.
package struct IdentityRecord: Sendable, Hashable {
    package var provider: ProviderID
    package var subject: String
    /// Only an address the provider verified.
    package var email: String?
    package var name: String?
    /// The provider's other standard claims (``Identity/profileClaims``): they become the user's profile when
    /// the user was made from this identity (schema v22).
    package var profile: [String: String]

    package init(provider: ProviderID, subject: String, email: String?, name: String?, profile: [String: String] = [:])
    {
        self.provider = provider
        self.subject = subject
        self.email = email
        self.name = name
        self.profile = profile
    }

    /// ``profile`` as stored: a JSON object, or `nil` when empty.
    package var profileText: String? {
        profile.isEmpty ? nil : JSONValue.object(profile.mapValues(JSONValue.string)).serialized()
    }

    /// The id of a user first made from this identity.
    package var derivedUserID: UserID { UserID(provider: provider, subject: subject) }

    /// The identity as one JSON text (a link's code keeps it in one column).
    package var serialized: String {
        var fields: [String: JSONValue] = ["provider": .string(provider.rawValue), "subject": .string(subject)]
        if let email { fields["email"] = .string(email) }
        if let name { fields["name"] = .string(name) }
        if !profile.isEmpty { fields["profile"] = .object(profile.mapValues(JSONValue.string)) }
        return String(decoding: JSONValue.object(fields).serializedBytes, as: UTF8.self)
    }

    /// Reads ``serialized``; `nil` for anything else.
    package init?(serialized: String) {
        guard let fields = JSONValue.parse(Array(serialized.utf8))?.objectValue,
            let provider = fields["provider"]?.stringValue.flatMap(ProviderID.init(rawValue:)),
            let subject = fields["subject"]?.stringValue, !subject.isEmpty
        else { return nil }
        self.init(
            provider: provider, subject: subject, email: fields["email"]?.stringValue,
            name: fields["name"]?.stringValue,
            profile: fields["profile"]?.objectValue?.compactMapValues(\.stringValue) ?? [:])
    }
}

/// An identity attached to a user: the way that provider account signs in as that user.
package struct LinkedIdentity: Sendable, Hashable {
    package var identity: IdentityRecord
    package var userID: UserID
    package var linkedAt: Int64

    package init(identity: IdentityRecord, userID: UserID, linkedAt: Int64) {
        self.identity = identity
        self.userID = userID
        self.linkedAt = linkedAt
    }
}

/// What signing in with a provider account came to.
package enum IdentitySignIn: Sendable, Hashable {
    case user(UserRecord)
    /// The identity was unlinked from the user that bears its derived id; it signs in as nobody until linked.
    case unlinked(from: UserID)
}

/// What attaching an identity to a user came to.
package enum LinkOutcome: Sendable, Hashable {
    case linked
    /// It was attached to this user already (nothing changed).
    case alreadyLinked
    /// Another user signs in with it.
    case ownedByAnotherUser
    /// The user has another account of this provider attached (one per provider).
    case providerTaken(subject: String)
    case userMissing
}

/// What adding an email + password way in to an existing user came to.
package enum PasswordLinkOutcome: Sendable, Hashable {
    case added
    /// Another account uses this email.
    case emailTaken
    /// The user has a password account already.
    case alreadyHasOne
    case userMissing
}

/// What detaching a way in came to.
package enum UnlinkOutcome: Sendable, Hashable {
    /// Detached; the live sessions that were started with it (their ids) are revoked in the same transaction.
    case unlinked(endedSessions: [String])
    case notLinked
    /// It is the user's only way to sign in.
    case lastWayIn
}

/// Linked identities (schema v8): which provider accounts sign in as which user. A user's ways in are their
/// identities plus their password account.
package protocol IdentityStore: Sendable {
    /// The identities attached to `user`, oldest first.
    func identities(user: UserID) async throws -> [LinkedIdentity]

    /// The user an identity signs in as, if it is attached to one.
    func identityOwner(provider: ProviderID, subject: String) async throws -> UserID?

    /// Attaches `identity` to `user` in one transaction: never one attached to another user, at most one per
    /// provider per user (a unique index decides, so two links at once cannot both win).
    func linkIdentity(_ identity: IdentityRecord, to user: UserID, now: Int64) async throws -> LinkOutcome

    /// Gives `user` an email + password way in (a password account), under the same unique email as
    /// registration.
    func addPasswordAccount(user: UserID, email: String, passwordHash: String, now: Int64) async throws
        -> PasswordLinkOutcome

    /// Frees an address nobody has confirmed (attack review RT2-5: an unverified address reserves nothing): in
    /// one transaction, the password account with `email` is deleted if its address is unconfirmed, with its
    /// user's unused mail links and the sessions started with it; a user left with no way in is deleted too.
    /// `nil` (nothing changed) when there is no such account or its address is confirmed.
    func releaseUnverifiedAddress(email: String, now: Int64) async throws -> ReleasedAddress?

    /// Detaches `user`'s identity of `provider` (for `.custom`: their password account, and their unused mail
    /// links), unless it is their last way in, and revokes their live sessions that were started with it. The
    /// user keeps their id.
    func unlinkIdentity(user: UserID, provider: ProviderID, now: Int64) async throws -> UnlinkOutcome
}

/// An unconfirmed address taken back from the user it was added to (``IdentityStore/releaseUnverifiedAddress``).
package struct ReleasedAddress: Sendable, Equatable {
    package var user: UserID
    /// The user had no other way in and is gone.
    package var userDeleted: Bool

    package init(user: UserID, userDeleted: Bool) {
        self.user = user
        self.userDeleted = userDeleted
    }
}
