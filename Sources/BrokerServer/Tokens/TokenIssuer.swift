import BrokerConfiguration
package import BrokerCore
import BrokerCrypto
package import BrokerStore
import Synchronization

/// The one place that issues the broker's tokens: sessions with their first refresh token, RFC 9068 access
/// tokens for users and CI clients, and the verifier of the broker's own access tokens. Every service that
/// ends in a token goes through it, so `iss`, `aud`, lifetimes and the signing key are decided once.
package final class TokenIssuer: Sendable {
    /// The client id of sessions started by the `broker` CLI (a public client: no secret, RFC 8252).
    package static let cliClientID = AppRules.cliClientID

    let configuration: ServerConfiguration
    let store: any Store
    let keys: KeyManager
    let clock: any WallClock
    /// Checks DPoP proofs (RFC 9449) where tokens are issued and where bound ones are presented.
    let dpop: DPoPChecker
    private let issuerValue: Mutex<String>
    /// Makes pairwise subjects (``subject(of:for:)``).
    private let pairwiseKey: HMACKey

    init(
        configuration: ServerConfiguration, store: any Store, keys: KeyManager, clock: any WallClock,
        dpopNonceKey: [UInt8], pairwiseKey: [UInt8]
    ) {
        self.pairwiseKey = HMACKey(.sha256, key: pairwiseKey)
        self.configuration = configuration
        self.store = store
        self.keys = keys
        self.clock = clock
        dpop = DPoPChecker(store: store, nonceKey: dpopNonceKey, requireNonce: configuration.dpopNonce)
        issuerValue = Mutex(configuration.issuer ?? "http://\(configuration.host):\(configuration.port)")
    }

    /// The issuer (`iss`, and the base of every URL in discovery).
    package var issuer: String { issuerValue.withLock { $0 } }

    /// Sets the issuer once the port is known (`--port 0`), unless one was configured.
    func serverStarted(host: String, port: Int) {
        guard configuration.issuer == nil else { return }
        let shownHost = host.contains(":") ? "[\(host)]" : host
        issuerValue.withLock { $0 = "http://\(shownHost):\(port)" }
    }

    var now: Int64 { clock.seconds() }

    /// The `sub` `app` knows `user` by (OpenID Connect Core 8): the user id, or for an app given pairwise
    /// subjects (``AppRecord/pairwiseSector``) one made for its sector — the same for every app of that sector,
    /// different across sectors, stable, and telling nothing of the user id without broker's key.
    package func subject(of user: UserID, for app: AppRecord?) -> String {
        guard let sector = app?.pairwiseSector else { return user.description }
        // 43 base64url characters: no colon, so never read as a user id (`provider:subject`) or a CI client's.
        return Base64URL.encode(pairwiseKey.authenticate(Array("\(sector)\u{0}\(user)".utf8)))
    }

    /// The `token_type` of what is issued now: `DPoP` under a proof, else `Bearer`.
    static var tokenType: String { DPoPBinding.current == nil ? "Bearer" : "DPoP" }

    /// Refresh tokens are 256-bit random values, base64url: 43 characters.
    static let refreshTokenLength = 43

    /// The scope a refresh grant asks for to get an account token (``accountToken(view:now:)``).
    static let accountScope = "account"

    /// An account token lives five minutes: long enough for a password check or a browser link, short enough
    /// that one left in a process's memory is soon worth nothing.
    static let accountTokenTTL: Int64 = 300

    /// The audience of account tokens: the broker's own account endpoints, never an API's (`aud` of API
    /// tokens is ``ServerConfiguration/audience``).
    var accountAudience: String { issuer + "/auth/account" }

    /// Starts a session: a session record, its first refresh token (stored only as its SHA-256), and an
    /// access token. Returns the contract's session response.
    /// `signedInWith` is the way in the sign-in went through (recorded, so that unlinking it ends the session).
    /// `emailVerified`: the address's standing when the caller has just read it (a password sign-in has the
    /// account in hand); `nil` reads it from the store.
    package func startSession(
        user: UserRecord, clientID: String, scope: String?, signedInWith: ProviderID?, emailVerified: Bool? = nil,
        resource: ResourceRecord? = nil
    ) async throws -> JSONValue {
        try await startSessionReturningID(
            user: user, clientID: clientID, scope: scope, signedInWith: signedInWith, emailVerified: emailVerified,
            resource: resource
        ).response.json
    }

    /// ``startSession(user:clientID:scope:signedInWith:emailVerified:resource:)`` that also returns the new
    /// session's id. `resource`: a registered resource (RFC 8707) the first access token is for.
    package func startSessionReturningID(
        user: UserRecord, clientID: String, scope: String?, signedInWith: ProviderID?, emailVerified: Bool? = nil,
        resource: ResourceRecord? = nil, claims: String? = nil, subject: String? = nil
    ) async throws -> (response: TokenResponse, sessionID: String) {
        let issuedAt = now
        let sessionID = try SecureRandom.argumentSafeToken(byteCount: 16)
        let refreshToken = try SecureRandom.token(byteCount: 32)
        do {
            try await store.createSession(
                SessionRecord(
                    id: sessionID,
                    userID: user.id,
                    clientID: clientID,
                    scope: scope,
                    createdAt: issuedAt,
                    revokedAt: nil,
                    signedInWith: signedInWith,
                    // A public client's proof binds its session: the refresh token needs the key from now on.
                    dpopJKT: DPoPBinding.current.flatMap { $0.bindsSession ? $0.thumbprint : nil },
                    claims: claims
                ),
                firstToken: RefreshTokenRecord(
                    hash: Digest.sha256(refreshToken),
                    sessionID: sessionID,
                    createdAt: issuedAt,
                    expiresAt: issuedAt + configuration.refreshTokenTTL
                )
            )
        } catch let error as StoreError where error.code == .disabled {
            throw APIError.accountDisabled
        }
        let verified: Bool
        if let emailVerified { verified = emailVerified } else { verified = try await self.emailVerified(user) }
        let access = try accessToken(
            user: user, emailVerified: verified, sessionID: sessionID, clientID: clientID, scope: scope,
            signedInWith: signedInWith, resource: resource, subject: subject, authTime: issuedAt, now: issuedAt)
        return (
            sessionResponse(
                user: user, accessToken: access, refreshToken: refreshToken, signedInWith: signedInWith,
                resource: resource),
            sessionID
        )
    }

    /// The contract's session response; `expiresIn` defaults to the access tokens' lifetime, `scope` (an account
    /// token's) is said when given. `provider` is the way in this session was started with (`signedInWith`,
    /// else the provider the user id was made from): the CLI signs in again with it.
    func sessionBody(
        user: UserRecord, accessToken: String, refreshToken: String?, expiresIn: Int64? = nil, scope: String? = nil,
        signedInWith: ProviderID? = nil, resource: ResourceRecord? = nil
    ) -> JSONValue {
        sessionResponse(
            user: user, accessToken: accessToken, refreshToken: refreshToken, expiresIn: expiresIn, scope: scope,
            signedInWith: signedInWith, resource: resource
        ).json
    }

    /// ``sessionBody(user:accessToken:refreshToken:expiresIn:scope:signedInWith:)`` as the wire document.
    func sessionResponse(
        user: UserRecord, accessToken: String, refreshToken: String?, expiresIn: Int64? = nil, scope: String? = nil,
        signedInWith: ProviderID? = nil, resource: ResourceRecord? = nil
    ) -> TokenResponse {
        TokenResponse(
            userID: user.id, provider: (signedInWith ?? user.id.provider).identityProvider, accessToken: accessToken,
            // An account token is never bound (it is for the broker's own account endpoints, for minutes), nor is
            // a bearer-only resource's.
            tokenType: scope == Self.accountScope || resource?.bearer == true ? "Bearer" : Self.tokenType,
            expiresIn: expiresIn ?? accessLifetime(for: resource), refreshToken: refreshToken, scope: scope
        )
    }

    /// How long an access token for `resource` lives: `server.access_token_ttl`, and for a bearer-only resource
    /// (``ResourceRecord/bearer``) at most ``ResourceRecord/bearerLifetime``.
    func accessLifetime(for resource: ResourceRecord?) -> Int64 {
        resource?.bearer == true
            ? min(configuration.accessTokenTTL, ResourceRecord.bearerLifetime) : configuration.accessTokenTTL
    }

    /// An RFC 9068 access token: header `typ: at+jwt` and `kid`; the contract's claims, plus `sid` (the
    /// session, so that revoking it ends its access tokens too).
    /// `idp` names the way in this session was started with (`signedInWith`), else the provider the user id was
    /// made from; `sub` is the user id whatever the way in. `aud` is `resource` when the request named a
    /// registered one (RFC 8707), else the client's own audience (``audience(ofUserTokensFor:)``).
    /// `subject`: a pairwise app's `sub` for the user (``subject(of:for:)``); the user id when `nil`.
    func accessToken(
        user: UserRecord, emailVerified: Bool, sessionID: String?, clientID: String, scope: String?,
        signedInWith: ProviderID? = nil, resource: ResourceRecord? = nil, subject: String? = nil,
        authTime: Int64? = nil, now: Int64
    ) throws -> String {
        var extra: [String: JSONValue] = [:]
        if let sessionID { extra["sid"] = .string(sessionID) }
        // The CLI's tokens carry the profile (the contract's claims); an app's only what its scopes grant (RT3-3).
        let isCLI = clientID == Self.cliClientID
        let granted = Set((scope ?? "").split(separator: " ").map(String.init))
        if let email = user.email, isCLI || granted.contains("email") {
            extra["email"] = .string(email)
            extra["email_verified"] = .bool(emailVerified)
        }
        if let name = user.name, isCLI || granted.contains("profile") { extra["name"] = .string(name) }
        if let scope { extra["scope"] = .string(scope) }
        // How the user signed in, for an API that asks more of some calls (RFC 9470): a session's tokens only.
        if let signedInWith { extra.merge(AuthenticationContext.claims(signedInWith)) { _, new in new } }
        // When the CLI's session signed in (RFC 9068 §2.2.1), for an API that asks for a recent sign-in (max_age).
        // An app's tokens from its code say the sign-in's own time (AppTokenService); a refreshed app token knows
        // only its session's start, which may be later than the sign-in, so it says none.
        if isCLI, let authTime { extra["auth_time"] = .int(authTime) }
        return try sign(
            subject: subject ?? user.id.description, audience: resource?.url ?? audience(ofUserTokensFor: clientID),
            lifetime: accessLifetime(for: resource), bound: resource?.bearer != true,
            idp: (signedInWith ?? user.id.provider).identityProvider.rawValue, clientID: clientID, now: now,
            extra: extra)
    }

    /// Whether `user`'s address is verified: a provider's user carries an address only when the provider
    /// verified it; a custom account's address is verified once its mailed link was followed.
    func emailVerified(_ user: UserRecord) async throws -> Bool {
        guard user.email != nil, user.id.provider == .custom else { return Self.emailVerified(user, confirmedAt: nil) }
        return Self.emailVerified(user, confirmedAt: try await store.passwordAccount(user: user.id)?.emailVerifiedAt)
    }

    /// The same, from a session's read, which carries the password account's confirmation time.
    func emailVerified(_ view: SessionView) -> Bool { Self.emailVerified(view.user, confirmedAt: view.emailVerifiedAt) }

    /// The same, from a password account in hand.
    static func emailVerified(_ account: PasswordAccount) -> Bool {
        emailVerified(account.user, confirmedAt: account.emailVerifiedAt)
    }

    private static func emailVerified(_ user: UserRecord, confirmedAt: Int64?) -> Bool {
        guard user.email != nil else { return false }
        guard user.id.provider == .custom else { return true }
        return confirmedAt != nil
    }

    /// A CI client's access token (`sub: client:<name>`, `idp: client`, no session): minted by
    /// `client_credentials` or token exchange, with the audience and lifetime the request chose.
    func clientAccessToken(
        client: String, audience: String, lifetime: Int64, scope: String?, federated: JSONValue?, now: Int64
    ) throws -> String {
        var extra: [String: JSONValue] = [:]
        if let scope { extra["scope"] = .string(scope) }
        if let federated { extra["federated"] = federated }
        return try sign(
            subject: "client:\(client)", audience: audience, lifetime: lifetime, idp: "client", clientID: client,
            now: now, extra: extra)
    }

    /// The claims every access token carries (RFC 9068 §2.2 and the contract's), plus `extra`, signed with
    /// the current key under `typ: at+jwt`.
    /// `bound: false` leaves `cnf` out even under a proof (a bearer-only resource's token).
    private func sign(
        subject: String, audience: String, lifetime: Int64, bound: Bool = true, idp: String, clientID: String,
        now: Int64, extra: [String: JSONValue]
    ) throws -> String {
        var claims: [String: JSONValue] = [
            "iss": .string(issuer),
            "sub": .string(subject),
            "aud": .string(audience),
            "iat": .int(now),
            "nbf": .int(now),
            "exp": .int(now + lifetime),
            "jti": .string(try SecureRandom.identifier(byteCount: 16)),
            "idp": .string(idp),
            "client_id": .string(clientID),
        ]
        claims.merge(extra) { _, added in added }
        // Minted under a DPoP proof: bound to its key (RFC 9449 §6). Account tokens stay plain (see sessionBody).
        if let binding = DPoPBinding.current, audience != accountAudience, bound {
            claims["cnf"] = .object(["jkt": .string(binding.thumbprint)])
        }
        return try keys.current.signer.sign(claims: claims, type: "at+jwt")
    }

    /// The `sub` of an id token this broker issued to `clientID`, as an `id_token_hint` (Core 3.1.2.1): its
    /// signature, issuer and audience are checked; an expired one still names its user.
    func idTokenHintSubject(_ hint: String, clientID: String) -> String? {
        guard let claims = idTokenHintClaims(hint), claims["aud"]?.stringValue == clientID else { return nil }
        return claims["sub"]?.stringValue
    }

    /// The claims of an id token this broker issued (to any app), expired or not: what an `id_token_hint` says.
    func idTokenHintClaims(_ hint: String) -> [String: JSONValue]? {
        var options = JWTVerifier.Options(issuer: issuer, audience: nil, expectedType: nil)
        options.leeway = 366 * 86_400
        guard let verified = try? JWTVerifier(keys: keys.current.keySet, options: options).verify(hint, now: now),
            verified.header["typ"]?.stringValue?.lowercased() != "at+jwt", verified.claims["azp"] != nil
        else { return nil }
        return verified.claims
    }

    /// The verifier of access tokens for APIs: `aud` is ``ServerConfiguration/audience`` (the CLI's and CI
    /// clients' tokens). An app's token (``audience(ofUserTokensFor:)``) is refused here.
    func verifier() -> JWTVerifier {
        JWTVerifier(
            keys: keys.current.keySet,
            options: JWTVerifier.Options(issuer: issuer, audience: configuration.audience, expectedType: "at+jwt")
        )
    }

    /// The `aud` of the user access tokens issued to `clientID` (RT3-4): ``ServerConfiguration/audience`` for
    /// the broker's CLI, whose tokens are for the operator's APIs; an app's own client id for an app, so that
    /// no API that checks `aud` against the broker's audience takes a token a third-party app was given.
    func audience(ofUserTokensFor clientID: String) -> String {
        clientID == Self.cliClientID ? configuration.audience : clientID
    }

    /// Whether `clientID` is one no app may be registered or known as: the CLI's own, or the APIs' audience (an
    /// app by that name would be given tokens every API takes).
    func isReservedClientID(_ clientID: String) -> Bool {
        AppRules.isReserved(clientID, apiAudience: configuration.audience)
    }

    /// Any access token this broker issued and still vouches for the signature of, whatever its audience among
    /// those it issues for: the APIs' (``verifier()``) or an app's own (its `client_id`). Revocation,
    /// introspection and userinfo take both; which one a caller may use is that caller's rule.
    func verifyAnyAccessToken(_ token: String) throws -> VerifiedJWT {
        let verified = try anyAudienceVerifier().verify(token, now: now)
        switch verified.claims["aud"] {
        case .some(.string(configuration.audience)):
            return verified
        case .some(.string(let audience))
        where audience == verified["client_id"]?.stringValue && !isReservedClientID(audience):
            return verified
        default:
            // Another audience: a CI client's token minted for an API of its choosing, or an account token.
            throw JWTError.audienceMismatch
        }
    }

    /// The verifier of the broker's access tokens whatever their `aud`: signature, `iss`, `typ`, times. Each
    /// caller applies its own audience rule (``verifyAnyAccessToken(_:)``, introspection's entitlement).
    func anyAudienceVerifier() -> JWTVerifier {
        JWTVerifier(
            keys: keys.current.keySet,
            options: JWTVerifier.Options(issuer: issuer, audience: nil, expectedType: "at+jwt")
        )
    }

    /// An account token (RT2-1): the proof, beyond an API access token, that account changes ask for — adding
    /// or removing a way in, changing the password, deleting or exporting the account. Only the refresh grant
    /// makes one (`scope=account`), and only for a session of the broker's own CLI: whoever holds nothing but
    /// an access token (what APIs, git servers and registries receive) cannot get one. Its audience is
    /// ``accountAudience``, so no API that checks `aud` accepts it, and the account endpoints accept nothing
    /// else; it lives ``accountTokenTTL`` seconds.
    func accountToken(view: SessionView, now: Int64) throws -> String {
        var extra: [String: JSONValue] = ["sid": .string(view.session.id), "scope": .string(Self.accountScope)]
        if let email = view.user.email {
            extra["email"] = .string(email)
            extra["email_verified"] = .bool(emailVerified(view))
        }
        return try sign(
            subject: view.user.id.description, audience: accountAudience, lifetime: Self.accountTokenTTL,
            idp: (view.session.signedInWith ?? view.user.id.provider).identityProvider.rawValue,
            clientID: view.session.clientID,
            now: now, extra: extra)
    }

    func accountVerifier() -> JWTVerifier {
        JWTVerifier(
            keys: keys.current.keySet,
            options: JWTVerifier.Options(issuer: issuer, audience: accountAudience, expectedType: "at+jwt")
        )
    }
}

extension TokenIssuer {
    /// The live session and user a verified user access token stands for; `invalid_token` otherwise.
    nonisolated(nonsending) func session(of verified: VerifiedJWT) async throws -> SessionView {
        guard let subject = verified.subject else {
            throw APIError.invalidToken("the access token has no valid subject")
        }
        guard let sessionID = verified["sid"]?.stringValue,
            let view = try await store.sessionWithUser(id: sessionID)
        else {
            throw APIError.invalidToken("the access token's session does not exist")
        }
        if let userID = UserID(subject) {
            guard view.session.userID == userID else {
                throw APIError.invalidToken("the access token's session does not exist")
            }
        } else {
            // A pairwise app's token: its sub is the one made for that app's sector (Core 8.1).
            guard !subject.contains(":"), view.session.clientID != Self.cliClientID,
                let app = try await store.app(clientID: view.session.clientID),
                self.subject(of: view.user.id, for: app) == subject
            else {
                throw APIError.invalidToken("the access token has no valid subject")
            }
        }
        guard view.session.revokedAt == nil else { throw APIError.invalidToken("the access token has been revoked") }
        return view
    }

    /// Whether session `id` exists, belongs to `user` and has not been revoked: what a link ticket, the sign-in
    /// it starts, its code and a device link approval ask of the session that asked for them.
    func isLive(session id: String, of user: UserID) async throws -> Bool {
        guard !id.isEmpty, let session = try await store.session(id: id) else { return false }
        return session.userID == user && session.revokedAt == nil
    }

    /// The session and user of an `Authorization: Bearer` user access token (not a CI client's), or of
    /// `Authorization: DPoP` with the request's proof (``DPoPRequest/current``) for a DPoP-bound one.
    func authenticate(authorization: String?) async throws -> SessionView {
        let (token, scheme) = try Self.presented(authorization)
        let verified: VerifiedJWT
        do {
            verified = try verifier().verify(token, now: now)
        } catch {
            if (try? verifyAnyAccessToken(token)) != nil { throw Self.appTokenRefused }
            throw APIError.invalidToken("the access token is not valid: \(error)")
        }
        try await checkBinding(verified, token: token, scheme: scheme)
        return try await session(of: verified)
    }

    /// The session and user of an `Authorization: Bearer` **account token** (``accountToken(view:now:)``): what
    /// every account change asks for. An API access token is refused here, whoever holds it (RT2-1): it proves
    /// possession of a token that is sent to other servers, never the right to change how the account is
    /// reached. The session must be a live session of the broker's CLI.
    func authenticateAccount(authorization: String?) async throws -> SessionView {
        let token = try Self.bearer(authorization)
        let verified: VerifiedJWT
        do {
            verified = try accountVerifier().verify(token, now: now)
        } catch {
            if (try? verifier().verify(token, now: now)) != nil {
                throw Self.accessTokenRefused
            }
            throw APIError.invalidToken("the account token is not valid: \(error)")
        }
        guard verified["scope"]?.stringValue == Self.accountScope,
            verified["client_id"]?.stringValue == Self.cliClientID
        else { throw Self.accessTokenRefused }
        let view = try await session(of: verified)
        guard view.session.clientID == Self.cliClientID else { throw Self.accessTokenRefused }
        return view
    }

    /// Why an app's access token (`aud` = its client id) is refused at the broker's own user endpoints.
    static let appTokenRefused = APIError(
        status: 401, code: .invalidToken,
        detail: "this access token was issued to an app (its aud is the app's client id): an app learns who the "
            + "user is at /auth/userinfo, with the claims its scopes grant",
        headers: [("WWW-Authenticate", "Bearer error=\"invalid_token\"")])

    /// Why an API access token cannot change an account.
    static let accessTokenRefused = APIError(
        status: 401, code: .invalidToken,
        detail: "account changes need an account token, which only the session's refresh token gets "
            + "(grant_type=refresh_token, scope=account; the broker CLI does this); an access token is for APIs "
            + "and cannot change how an account is reached",
        headers: [("WWW-Authenticate", "Bearer error=\"invalid_token\", scope=\"account\"")])

    /// The token of an `Authorization: Bearer <token>` header.
    static func bearer(_ authorization: String?) throws -> String {
        guard let authorization else {
            throw APIError.invalidToken("an Authorization: Bearer access token is required")
        }
        guard let field = AuthorizationCredentials(authorization), field.isScheme("bearer") else {
            throw APIError.invalidToken("the Authorization header must be \"Bearer <access token>\"")
        }
        return field.credentials
    }
}
