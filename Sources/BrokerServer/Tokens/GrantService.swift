import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging
import ProviderSupport

/// `POST /auth/token` (every grant), `POST /auth/revoke` and `GET /auth/me`: what the broker does with the
/// tokens it issued (the `authorization_code` grant, the CLI's and apps', is
/// ``AppTokenService``'s).
final class GrantService: ContextualService {
    let context: ServiceContext
    let clients: ClientService
    /// The device flow's grant (RFC 8628).
    let devices: DeviceService

    init(
        context: ServiceContext, clients: ClientService, devices: DeviceService
    ) {
        self.context = context
        self.devices = devices
        self.clients = clients
    }

    /// `POST /auth/token`.
    nonisolated(nonsending) func token(_ input: RequestInput, authorization: String? = nil) async throws -> APIResponse
    {
        let grantType = try input.string("grant_type")
        switch grantType {
        case "refresh_token": return try await refresh(input)
        case "client_credentials":
            return try await metrics.counting(success: "issued", { mintCounted(grant: "client_credentials", $0) }) {
                try await clients.clientCredentials(input, authorization: authorization)
            }
        case ClientService.tokenExchangeGrant:
            return try await metrics.counting(success: "issued", { mintCounted(grant: "token_exchange", $0) }) {
                try await clients.tokenExchange(input, authorization: authorization)
            }
        case DeviceService.grantType:
            return try await devices.grant(input)
        default:
            throw APIError.unsupportedGrantType("unknown grant_type \"\(grantType.prefix(100))\"")
        }
    }

    /// A CI mint's outcome, in the metrics and (when refused) the audit trail.
    private func mintCounted(grant: String, _ outcome: String) {
        metrics.mint(grant: grant, outcome: outcome)
        if outcome != "issued" {
            audit.record("mint", outcome: "failure", fields: ["grant": grant, "reason": outcome])
        }
    }

    /// The refresh grant: rotation, and reuse detection that revokes the whole session (RFC 9700 §4.14.2).
    /// - Parameter client: the app the request authenticated as (``AppTokenService/authenticate(_:authorization:)``),
    ///   if it did. A session an app started rotates only for that app; a confidential app's only with its
    ///   secret (RFC 6749 §6) — a refresh token presented without it is taken as stolen and ends the session.
    func refresh(_ input: RequestInput, client: AppRecord? = nil) async throws -> APIResponse {
        let presented = try input.string("refresh_token")
        guard presented.utf8.count == TokenIssuer.refreshTokenLength, Base64URL.decode(presented) != nil else {
            metrics.refresh(outcome: "unknown")
            throw APIError.invalidGrant("the refresh token is not one this broker issued")
        }
        // `scope=account`: an account token instead of an API access token (RT2-1); any other scope is the
        // session's own, as before.
        let wantsAccount = try input.optionalString("scope") == TokenIssuer.accountScope
        // RFC 8707: a token for another registered resource, without a new sign-in. Checked before the rotation, so
        // that a refused resource spends nothing.
        let resource = try await ResourceIndicators.named(try input.optionalString("resource"), store: store)
        if wantsAccount && resource != nil {
            throw APIError(
                status: 400, code: ResourceIndicators.invalidTarget,
                detail: "an account token is for the broker's account endpoints only: no resource with scope=account")
        }
        let next = try SecureRandom.token(byteCount: 32)
        let time = now
        let outcome = try await store.rotateRefreshToken(
            hash: Digest.sha256(presented),
            nextHash: Digest.sha256(next),
            nextExpiresAt: time + configuration.refreshTokenTTL,
            now: time,
            proofKey: DPoPBinding.current?.thumbprint
        )
        metrics.refresh(outcome: outcome.label)
        if case .rotated(let view) = outcome, try await !refreshAllowed(view, client: client) {
            if try await store.revokeSession(id: view.session.id, now: time) {
                metrics.revocation(reason: "client_mismatch")
            }
            audit.record(
                "refresh_token_refused", outcome: "failure", user: view.user.id,
                fields: ["client_id": view.session.clientID, "reason": "client_authentication"])
            throw AppTokenService.invalidClient
        }
        switch outcome {
        case .rotated(let view) where wantsAccount:
            // Only the CLI's own sessions manage the account. Any other session asking for it (an app's refresh
            // token, the next issue's) is ended: its refresh token was spent by the rotation above, and a
            // client that asks for what it can never have is not one to keep trusting.
            guard view.session.clientID == TokenIssuer.cliClientID else {
                if try await store.revokeSession(id: view.session.id, now: time) {
                    metrics.revocation(reason: "account_scope_refused")
                }
                audit.record(
                    "account_token", outcome: "failure", user: view.user.id,
                    fields: ["client_id": view.session.clientID, "reason": "not_the_cli"])
                throw APIError(
                    status: 400, code: .invalidScope,
                    detail: "only the broker CLI's sessions may ask for scope=account; this session has been ended")
            }
            let account = try tokens.accountToken(view: view, now: time)
            audit.record("account_token", user: view.user.id, fields: ["session": String(view.session.id.prefix(8))])
            return .tokens(
                tokens.sessionBody(
                    user: view.user, accessToken: account, refreshToken: next, expiresIn: TokenIssuer.accountTokenTTL,
                    scope: TokenIssuer.accountScope, signedInWith: view.session.signedInWith))
        case .rotated(let view):
            // An app given pairwise subjects keeps its users' sub for that app (OpenID Connect Core 8.1).
            var subject: String?
            if view.session.clientID != TokenIssuer.cliClientID {
                let app =
                    client?.clientID == view.session.clientID
                    ? client : try await store.app(clientID: view.session.clientID)
                if app?.pairwiseSector != nil { subject = tokens.subject(of: view.user.id, for: app) }
            }
            let access = try tokens.accessToken(
                user: view.user,
                emailVerified: tokens.emailVerified(view),
                sessionID: view.session.id,
                clientID: view.session.clientID,
                scope: view.session.scope,
                signedInWith: view.session.signedInWith,
                resource: resource,
                subject: subject,
                authTime: view.session.createdAt,
                now: time
            )
            return .tokens(
                tokens.sessionBody(
                    user: view.user, accessToken: access, refreshToken: next, signedInWith: view.session.signedInWith,
                    resource: resource))
        case .unknown:
            throw APIError.invalidGrant("the refresh token is not valid")
        case .expired:
            throw APIError.invalidGrant("the refresh token has expired; sign in again")
        case .revoked:
            throw APIError.invalidGrant("the session has been revoked; sign in again")
        case .boundToAnotherKey:
            // RFC 9449 §5: a public client's refresh token is bound to the key of its first proof.
            throw APIError(
                status: 400, code: .invalidDPoPProof,
                detail: "the refresh token is bound to a DPoP key: send a DPoP proof made with that key")
        case .reused(let sessionID):
            metrics.revocation(reason: "refresh_reuse")
            audit.record(
                "refresh_token_reused", outcome: "failure", fields: ["session": String(sessionID.prefix(8))])
            logger.warning(
                "refresh token reused: session revoked",
                metadata: ["broker.session": "\(sessionID.prefix(8))"]
            )
            throw APIError.invalidGrant("the refresh token was already used; the session has been revoked")
        }
    }

    /// Whether the authenticated `client` (or none) may rotate a token of `view`'s session.
    private func refreshAllowed(_ view: SessionView, client: AppRecord?) async throws -> Bool {
        if let client { return client.clientID == view.session.clientID }
        guard view.session.clientID != TokenIssuer.cliClientID,
            let app = try await store.app(clientID: view.session.clientID)
        else { return true }
        return app.isPublic
    }

    /// `POST /auth/revoke` (RFC 7009): a refresh token, or one of our access tokens, ends its session.
    /// 200 whether or not the token was known (§2.2).
    func revoke(_ input: RequestInput) async throws -> APIResponse {
        let token = try input.string("token")
        let hint = try input.optionalString("token_type_hint")
        if hint != nil && hint != "refresh_token" && hint != "access_token" {
            // §2.2.1: an unknown hint is not an error; the server searches all types.
            logger.debug("unknown token_type_hint")
        }
        if token.utf8.count == TokenIssuer.refreshTokenLength && !token.contains(".") {
            if try await store.revokeSession(byRefreshTokenHash: Digest.sha256(token), now: now) {
                metrics.revocation(reason: "logout")
                audit.record("logout", fields: ["token_type": "refresh_token"])
            }
        } else if token.contains("."),
            let verified = try? tokens.verifyAnyAccessToken(token),
            let sessionID = verified["sid"]?.stringValue
        {
            if try await store.revokeSession(id: sessionID, now: now) {
                metrics.revocation(reason: "logout")
                audit.record(
                    "logout", user: verified.subject.flatMap(UserID.init),
                    fields: ["token_type": "access_token", "session": String(sessionID.prefix(8))])
            }
        }
        return APIResponse(status: 200, body: .object([:]), headers: [("Cache-Control", "no-store")])
    }

    /// `GET /auth/me`: who the bearer of a valid, unrevoked access token is.
    /// An app's token is refused here (RT3-3): what an app may learn is what its scopes grant, at
    /// `/auth/userinfo`.
    nonisolated(nonsending) func me(authorization: String?) async throws -> APIResponse {
        let (token, scheme) = try TokenIssuer.presented(authorization)
        let verified: VerifiedJWT
        do {
            verified = try tokens.verifier().verify(token, now: now)
        } catch {
            if (try? tokens.verifyAnyAccessToken(token)) != nil { throw TokenIssuer.appTokenRefused }
            throw APIError.invalidToken("the access token is not valid: \(error)")
        }
        try await tokens.checkBinding(verified, token: token, scheme: scheme)
        if let subject = verified.subject, subject.hasPrefix("client:") {
            return try await clients.clientIdentity(verified, subject: subject)
        }
        let view = try await session(of: verified)
        let user = view.user
        // `provider`: the way in this session was started with (a Google user signed in with their linked
        // password says custom).
        var body: [String: JSONValue] = [
            "user_id": .string(user.id.description),
            "provider": .string((view.session.signedInWith ?? user.id.provider).identityProvider.rawValue),
        ]
        if let email = user.email {
            body["email"] = .string(email)
            body["email_verified"] = .bool(tokens.emailVerified(view))
        }
        if let name = user.name { body["name"] = .string(name) }
        return APIResponse(status: 200, body: .object(body), headers: [("Cache-Control", "no-store")])
    }

    /// The live session and user a verified user access token stands for; `invalid_token` otherwise.
    nonisolated(nonsending) func session(of verified: VerifiedJWT) async throws -> SessionView {
        try await tokens.session(of: verified)
    }

    /// The session and user of an `Authorization: Bearer` user access token (not a CI client's).
    func authenticate(authorization: String?) async throws -> SessionView {
        try await tokens.authenticate(authorization: authorization)
    }
}

extension RotationOutcome {
    /// The outcome as a metrics label.
    var label: String {
        switch self {
        case .rotated: "rotated"
        case .unknown: "unknown"
        case .expired: "expired"
        case .revoked: "revoked"
        case .reused: "reused"
        case .boundToAnotherKey: "dpop_key_mismatch"
        }
    }
}
