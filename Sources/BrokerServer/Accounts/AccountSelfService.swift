import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging

/// What a signed-in person does with their own account: delete it, or export what the broker keeps about it.
final class AccountSelfService: ContextualService {
    let accounts: AccountService
    let grants: GrantService

    init(accounts: AccountService, grants: GrantService) {
        self.accounts = accounts
        self.grants = grants
    }

    var context: ServiceContext { accounts.context }

    /// `POST /auth/account/delete` with an account token (never an API access token, RT2-1): a custom account
    /// gives its password (`{"password"}`); a provider's user signed in within the last ten minutes. Removes the
    /// user, their password, sessions and refresh tokens, codes and links; their access tokens fail at
    /// `/auth/me` at once. An account with two factors needs a sign-in with both first, and one without a password
    /// a recent sign-in (RFC 9470 challenges, ``StepUp``).
    func delete(_ input: RequestInput, authorization: String?, address: String? = nil) async throws -> APIResponse {
        let view = try await grants.tokens.authenticateAccount(authorization: authorization)
        let user = view.user
        if let account = try await store.passwordAccount(user: user.id) {
            try await StepUp.requireStrongest(view, authorization: authorization, store: store, now: now)
            let password = Secret(try input.string("password"))
            guard try await accounts.verifyCurrentPassword(password, of: account, address: address) else {
                audit.record(
                    "account_deleted", outcome: "failure", user: user.id, fields: ["reason": "wrong_password"])
                throw APIError.invalidCredentials
            }
        } else {
            try await StepUp.requireStrongest(
                view, authorization: authorization, maxAge: StepUp.recent, store: store, now: now)
        }
        try await deleteAccount(user.id)
        return APIResponse(
            status: 200, body: ["status": "deleted", "user_id": .string(user.id.description)],
            headers: [("Cache-Control", "no-store")])
    }

    /// Deletes `user`'s account, once its owner has shown it is them (the API's checks, or the account page's).
    func deleteAccount(_ user: UserID, flow: String? = nil) async throws {
        guard try await store.deleteUser(id: user, now: now) else {
            throw APIError.invalidToken("the account no longer exists")
        }
        metrics.accountDeleted()
        audit.record(
            "account_deleted", user: user,
            fields: ["provider": user.provider.rawValue].merging(flow.map { ["flow": $0] } ?? [:]) { $1 })
        logger.info("account deleted by its user", metadata: ["broker.user": "\(user)"])
    }

    /// `GET /auth/account/export` with an account token: everything the broker keeps about the user, as JSON — never a hash, a token
    /// or a link.
    func export(authorization: String?) async throws -> APIResponse {
        let user = try await grants.tokens.authenticateAccount(authorization: authorization).user
        return APIResponse(
            status: 200, body: try await exportDocument(of: user), headers: [("Cache-Control", "no-store")])
    }

    /// Everything the broker keeps about `user` (the export's document); the export is audited.
    func exportDocument(of user: UserRecord) async throws -> JSONValue {
        var document: [String: JSONValue] = [
            "exported_at": .string(RFC3339.format(epochSeconds: now)),
            "user": [
                "user_id": .string(user.id.description), "provider": .string(user.id.provider.rawValue),
                "subject": .string(user.id.subject), "email": user.email.map(JSONValue.string) ?? .null,
                "name": user.name.map(JSONValue.string) ?? .null,
                "created_at": .string(RFC3339.format(epochSeconds: user.createdAt)),
            ],
        ]
        if let status = try await store.userStatus(id: user.id), let disabled = status.disabledAt {
            document["disabled_at"] = .string(RFC3339.format(epochSeconds: disabled))
        }
        if let account = try await store.passwordAccount(user: user.id) {
            document["password_account"] = [
                "email": .string(account.email),
                "email_verified_at": account.emailVerifiedAt.map { .string(RFC3339.format(epochSeconds: $0)) } ?? .null,
            ]
        }
        document["identities"] = .array(
            try await store.identities(user: user.id).map { linked in
                [
                    "provider": .string(linked.identity.provider.rawValue), "subject": .string(linked.identity.subject),
                    "email": linked.identity.email.map(JSONValue.string) ?? .null,
                    "name": linked.identity.name.map(JSONValue.string) ?? .null,
                    "linked_at": .string(RFC3339.format(epochSeconds: linked.linkedAt)),
                ]
            })
        document["sessions"] = .array(
            try await store.sessions(user: user.id).map { session in
                [
                    "session_id": .string(session.id), "client_id": .string(session.clientID),
                    "scope": session.scope.map(JSONValue.string) ?? .null,
                    "created_at": .string(RFC3339.format(epochSeconds: session.createdAt)),
                    "revoked_at": session.revokedAt.map { .string(RFC3339.format(epochSeconds: $0)) } ?? .null,
                    "signed_in_with": session.signedInWith.map { .string($0.rawValue) } ?? .null,
                ]
            })
        // Passkeys: what identifies each (its id, name, public key, authenticator model), never a secret — a
        // passkey's private key never leaves the authenticator.
        document["passkeys"] = .array(
            try await store.passkeys(user: user.id).map { passkey in
                [
                    "id": .string(passkey.id), "name": .string(passkey.name),
                    "public_key_cose": .string(Base64URL.encode(passkey.publicKey)),
                    "algorithm": .int(Int64(passkey.algorithm)), "sign_count": .int(passkey.signCount),
                    "transports": .array(passkey.transports.map(JSONValue.string)),
                    "backup_eligible": .bool(passkey.backupEligible), "backed_up": .bool(passkey.backedUp),
                    "aaguid": .string(passkey.aaguid),
                    "created_at": .string(RFC3339.format(epochSeconds: passkey.createdAt)),
                    "last_used_at": passkey.lastUsedAt.map { .string(RFC3339.format(epochSeconds: $0)) } ?? .null,
                ]
            })
        // The address kept for recovery by mail when the password went (only while it is kept).
        document["recovery_address"] =
            try await store.recoveryAddress(user: user.id).map { kept -> JSONValue in
                [
                    "email": .string(kept.email),
                    "verified_at": .string(RFC3339.format(epochSeconds: kept.verifiedAt)),
                ]
            } ?? .null
        document["audit_events"] = .array(
            try await store.auditEvents(user: user.id, since: nil, limit: 10_000).map { event in
                JSONValue.parse(Array(event.document.utf8)) ?? .string(event.document)
            })
        audit.record("account_exported", user: user.id)
        return .object(document)
    }
}
