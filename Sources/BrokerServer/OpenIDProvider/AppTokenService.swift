import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging

/// The `authorization_code` grant — the one grant of the authorization endpoint's codes, for apps and the broker
/// CLI alike (``CLIClient``) — with client authentication (`client_secret_basic`, `client_secret_post`, or none +
/// PKCE for public clients), id tokens, and `/auth/userinfo` with the claims the granted scopes allow (issue
/// "Sign in to any app").
package final class AppTokenService: ContextualService {
    package let context: ServiceContext
    package let secrets: ClientSecretHasher
    let assertions: ClientAssertions

    init(context: ServiceContext, secrets: ClientSecretHasher, assertions: ClientAssertions) {
        self.context = context
        self.secrets = secrets
        self.assertions = assertions
    }

    /// The client authentication methods discovery names.
    static let authenticationMethods = [
        "client_secret_basic", "client_secret_post", "client_secret_jwt", "private_key_jwt", "none",
    ]

    /// Whether a token request is an app's: it authenticates with Basic or an assertion, or names a client other
    /// than the CLI.
    static func isAppRequest(_ input: RequestInput, authorization: String?) -> Bool {
        if let authorization, authorization.lowercased().hasPrefix("basic ") { return true }
        if (try? input.optionalString("client_assertion")) != nil { return true }
        if let clientID = try? input.optionalString("client_id"), clientID != TokenIssuer.cliClientID { return true }
        return false
    }

    static let invalidClient = APIError(
        status: 401, code: .invalidClient, detail: "client authentication failed",
        headers: [("WWW-Authenticate", "Basic realm=\"broker\"")])

    /// The app a token request authenticates as (RFC 6749 §2.3): Basic or the form's `client_secret` for a
    /// confidential app (exactly one way), no secret for a public one. `cliWhenUnnamed`: a code request that names
    /// no client and sends no Basic is the broker CLI's (the contract's code exchange names none).
    func authenticate(_ input: RequestInput, authorization: String?, cliWhenUnnamed: Bool = false) async throws
        -> AppRecord
    {
        var clientID = try input.optionalString("client_id")
        var secret = try input.optionalString("client_secret")
        // private_key_jwt (RFC 7523): the assertion alone, never beside a secret.
        let assertionType = try input.optionalString("client_assertion_type")
        let assertion = try input.optionalString("client_assertion")
        if assertionType != nil || assertion != nil {
            guard assertionType == ClientAssertions.type, let assertion, secret == nil,
                authorization?.lowercased().hasPrefix("basic ") != true
            else {
                throw APIError(
                    status: 401, code: .invalidClient,
                    detail: "client_assertion_type must be \(ClientAssertions.type), with a client_assertion and "
                        + "no other client authentication",
                    headers: [("WWW-Authenticate", "Basic realm=\"broker\"")])
            }
            return try await assertions.authenticate(assertion, clientID: clientID)
        }
        if let authorization, authorization.lowercased().hasPrefix("basic ") {
            guard secret == nil,
                let pair = HTTPBasic.credentials(fromToken: String(authorization.dropFirst(6)).trimmingWhitespace()),
                clientID == nil || clientID == pair.id
            else { throw Self.invalidClient }
            clientID = pair.id
            secret = pair.secret
        }
        if clientID == nil, secret == nil, cliWhenUnnamed { clientID = CLIClient.clientID }
        guard let clientID,
            let app = try await cliWhenUnnamed ? client(clientID: clientID) : app(clientID: clientID)
        else {
            throw Self.invalidClient
        }
        // An app with keys authenticates with them: neither a secret nor nothing will do.
        guard !app.authenticatesWithKeys else { throw Self.invalidClient }
        // Some native clients (oidc-agent) send an empty secret for a public app: that is no secret.
        if app.isPublic && secret == "" { secret = nil }
        switch (app.secretHash, secret) {
        case (nil, nil): return app
        case (let stored?, let presented?) where secrets.verify(Secret(presented), against: stored): return app
        default: throw Self.invalidClient
        }
    }

    /// `grant_type=authorization_code`: an app's code, or the CLI's. A second use of a code fails and revokes the
    /// session the first one started (RFC 6749 §4.1.2).
    func authorizationCode(_ input: RequestInput, authorization: String?) async throws -> APIResponse {
        let app = try await authenticate(input, authorization: authorization, cliWhenUnnamed: true)
        let code = try input.string("code")
        let redirectURI = try input.string("redirect_uri")
        let verifier = try input.optionalString("code_verifier")
        guard code.utf8.count == TokenIssuer.refreshTokenLength, Base64URL.decode(code) != nil else {
            throw APIError.invalidGrant("the code is not one this broker issued")
        }
        // RFC 8707: checked before the code is spent, so that a refused resource spends nothing.
        let named = try await ResourceIndicators.named(try input.optionalString("resource"), store: store)
        let hash = Digest.sha256(code)
        let record: AuthorizationCodeRecord
        switch try await store.redeemAuthorizationCode(hash: hash, now: now) {
        case .unknown:
            throw APIError.invalidGrant("the code is not valid")
        case .reused(let sessionID):
            // A replayed code ends what it issued (RFC 6749 §4.1.2).
            if let sessionID, try await store.revokeSession(id: sessionID, now: now) {
                metrics.revocation(reason: "code_reuse")
                audit.record(
                    "authorization_code_reused", outcome: "failure",
                    fields: ["session": String(sessionID.prefix(8)), "client_id": app.clientID])
            }
            throw APIError.invalidGrant("the code has already been used")
        case .expired:
            throw APIError.invalidGrant("the code has expired; sign in again")
        case .browserSessionEnded:
            throw APIError.invalidGrant(
                "the sign-in this code came from has ended (signed out, revoked or reset); sign in again")
        case .redeemed(let found):
            record = found
        }
        guard record.clientID == app.clientID else {
            throw APIError.invalidGrant("the code was issued to another client")
        }
        guard record.redirectURI == redirectURI else {
            throw APIError.invalidGrant("redirect_uri is not the one the code was issued for")
        }
        if let challenge = record.codeChallenge {
            guard let verifier, PKCE.verify(verifier: verifier, challenge: challenge) else {
                throw APIError.invalidGrant("code_verifier does not match the code_challenge")
            }
        } else if verifier != nil {
            throw APIError.invalidGrant("code_verifier sent for a code issued without a code_challenge")
        }
        guard let user = try await store.user(id: record.userID) else {
            throw APIError.invalidGrant("the account no longer exists")
        }
        // The resource the sign-in asked for, or — when it asked for none — any registered one named now.
        if let named, let granted = record.resource, named.url != granted {
            throw APIError(
                status: 400, code: ResourceIndicators.invalidTarget,
                detail: "the code was granted for another resource (\(granted.prefix(256)))")
        }
        var resource = named
        if resource == nil, let granted = record.resource {
            guard let registered = try await store.resource(url: granted) else {
                throw APIError(
                    status: 400, code: ResourceIndicators.invalidTarget,
                    detail: "the resource the code was granted for is no longer registered")
            }
            resource = registered
        }
        if app.clientID == CLIClient.clientID {
            return try await cliSession(record, hash: hash, user: user, resource: resource)
        }
        let scopes = record.scope.split(separator: " ").map(String.init)
        let claims = record.claims.flatMap { try? ClaimsRequest.parse($0) }
        let userinfoClaims = claims.flatMap { $0.userinfo.isEmpty ? nil : ClaimsRequest(userinfo: $0.userinfo) }
        let (session, sessionID) = try await tokens.startSessionReturningID(
            user: user, clientID: app.clientID, scope: record.scope, signedInWith: record.signedInWith,
            resource: resource, claims: userinfoClaims?.serialized,
            subject: app.pairwiseSector == nil ? nil : tokens.subject(of: user.id, for: app))
        try await store.attachSession(sessionID, toCode: hash, now: now)
        var answer = OpenIDTokenResponse(
            accessToken: session.accessToken, tokenType: session.tokenType, expiresIn: session.expiresIn,
            scope: record.scope,
            // A refresh token only when the app asked to stay signed in (Core 11).
            refreshToken: scopes.contains("offline_access") ? session.refreshToken : nil)
        if scopes.contains("openid") {
            answer.idToken = try await idToken(
                user: user, app: app, code: record, accessToken: session.accessToken, scopes: scopes,
                claims: claims)
        }
        metrics.appToken(outcome: "issued")
        audit.record("app_token", user: user.id, fields: ["client_id": app.clientID])
        return .tokens(answer.json)
    }

    /// The CLI's code, redeemed: a CLI session (the APIs' audience, DPoP-bound when the request sent a proof),
    /// after attaching the identity of a `broker link` while the session that asked for it is live (RT2-1).
    private func cliSession(
        _ record: AuthorizationCodeRecord, hash: [UInt8], user: UserRecord, resource: ResourceRecord?
    ) async throws -> APIResponse {
        guard record.codeChallenge != nil else { throw APIError.invalidGrant("the code is not valid") }
        if let identity = record.link {
            guard let asking = record.linkSession, try await tokens.isLive(session: asking, of: user.id) else {
                audit.record(
                    "linked", outcome: "failure", user: user.id,
                    fields: ["provider": identity.provider.rawValue, "reason": "session_ended"])
                throw APIError.invalidGrant("the session that asked for this link has ended; run broker link again")
            }
            try await attachLinked(identity, to: user)
        }
        let (response, sessionID) = try await tokens.startSessionReturningID(
            user: user, clientID: CLIClient.clientID, scope: nil, signedInWith: record.signedInWith,
            resource: resource)
        try await store.attachSession(sessionID, toCode: hash, now: now)
        return .tokens(response.json)
    }

    /// The id token (Core 2): signed with the app's algorithm (RS256 unless it chose another), with the claims
    /// the scopes give and those the `claims` parameter named for it (Core 5.5).
    func idToken(
        user: UserRecord, app: AppRecord, code: AuthorizationCodeRecord, accessToken: String, scopes: [String],
        claims requested: ClaimsRequest? = nil
    )
        async throws -> String
    {
        let issuedAt = now
        var claims: [String: JSONValue] = [
            "iss": .string(tokens.issuer), "sub": .string(tokens.subject(of: user.id, for: app)),
            "aud": .string(app.clientID),
            "azp": .string(app.clientID), "iat": .int(issuedAt),
            "exp": .int(issuedAt + tokens.configuration.accessTokenTTL), "auth_time": .int(code.authTime),
            "at_hash": .string(Self.halfHash(accessToken)), "idp": .string(code.signedInWith.identityProvider.rawValue),
        ]
        claims.merge(AuthenticationContext.claims(code.signedInWith)) { _, new in new }
        if let browserSession = code.browserSession { claims["sid"] = .string(browserSession) }
        if let nonce = code.nonce { claims["nonce"] = .string(nonce) }
        claims.merge(
            try await profileClaims(
                user: user, scopes: scopes, named: Set(requested.map { Array($0.idToken.keys) } ?? []))
        ) { _, new in new }
        guard let signer = tokens.keys.current.idTokenSigner(algorithm: app.idTokenAlgorithm) else {
            logger.error("no key for the app's id token algorithm", metadata: ["alg": "\(app.idTokenAlgorithm)"])
            throw APIError.serverError
        }
        return try signer.sign(claims: claims, type: "JWT")
    }

    /// `at_hash`: the left half of the SHA-256 of the access token, base64url (Core 3.1.3.6; every algorithm
    /// broker signs with uses SHA-256 or, for EdDSA, is given it by convention).
    package static func halfHash(_ token: String) -> String {
        Base64URL.encode(Array(Digest.sha256(token).prefix(16)))
    }

    /// The user's claims that the scopes give (Core 5.4), or that a `claims` parameter `named` one by one
    /// (Core 5.5): `email` and `email_verified`, `name`, and under `profile` what the user's provider gave of
    /// `given_name`, `family_name`, `preferred_username`, `picture`, `locale`, with `updated_at`. A standard claim
    /// broker has no value for — `address`, `phone_number` — is left out, as Core 5.3.2 has it.
    func profileClaims(user: UserRecord, scopes: [String], named: Set<String> = []) async throws -> [String: JSONValue]
    {
        func wanted(_ claim: String) -> Bool {
            named.contains(claim) || ClaimsRequest.scopeOfClaim[claim].map(scopes.contains) == true
        }
        var claims: [String: JSONValue] = [:]
        if let email = user.email {
            if wanted("email") { claims["email"] = .string(email) }
            if wanted("email_verified") { claims["email_verified"] = .bool(try await tokens.emailVerified(user)) }
        }
        if wanted("name"), let name = user.name { claims["name"] = .string(name) }
        // The profile is a read of its own, made only when one of its claims is wanted.
        if (Identity.profileClaims + ["updated_at"]).contains(where: wanted),
            let profile = try await store.userProfile(id: user.id)
        {
            for (claim, value) in profile.claims where wanted(claim) && Identity.profileClaims.contains(claim) {
                claims[claim] = .string(value)
            }
            if wanted("updated_at") { claims["updated_at"] = .int(profile.updatedAt) }
        }
        return claims
    }

    /// `GET|POST /auth/userinfo` (Core 5.3): the claims the token's scopes allow. An id token (or any token
    /// that is not a broker access token) is refused; a token without `openid` is 403 `insufficient_scope`.
    func userinfo(authorization: String?, formToken: String?) async throws -> APIResponse {
        let token: String
        let scheme: TokenIssuer.Presentation
        if authorization != nil {
            (token, scheme) = try TokenIssuer.presented(authorization)
        } else if let formToken {
            (token, scheme) = (formToken, .bearer)
        } else {
            throw APIError(
                status: 401, code: .invalidToken, detail: "a Bearer access token is required",
                headers: [("WWW-Authenticate", "Bearer realm=\"broker\"")])
        }
        let verified: VerifiedJWT
        do {
            verified = try tokens.verifyAnyAccessToken(token)
        } catch {
            throw APIError(
                status: 401, code: .invalidToken, detail: "the access token is not valid: \(error)",
                headers: [("WWW-Authenticate", "Bearer realm=\"broker\", error=\"invalid_token\"")])
        }
        try await tokens.checkBinding(verified, token: token, scheme: scheme)
        let view = try await tokens.session(of: verified)
        let scopes = (verified.claims["scope"]?.stringValue ?? "").split(separator: " ").map(String.init)
        guard scopes.contains("openid") else {
            throw APIError(
                status: 403, code: .insufficientScope, detail: "the token was not granted the openid scope",
                headers: [("WWW-Authenticate", "Bearer realm=\"broker\", error=\"insufficient_scope\"")])
        }
        // The sub the app knows the user by (its pairwise one, Core 8.1), and what the sign-in's `claims`
        // parameter asked userinfo for (Core 5.5), kept with the session.
        let app =
            view.session.clientID == TokenIssuer.cliClientID
            ? nil : try await store.app(clientID: view.session.clientID)
        // An app that requires two factors gets nothing for a one-factor sign-in (a token from before it asked).
        if let app, app.requireMFA,
            AuthenticationContext.acr(view.session.signedInWith) != AuthenticationContext.twoFactors
        {
            throw StepUp.challenge(
                StepUp.Need(acr: AuthenticationContext.twoFactors),
                detail: "this app requires a sign-in with two factors (acr 2); sign in to it again",
                authorization: authorization)
        }
        var claims: [String: JSONValue] = ["sub": .string(tokens.subject(of: view.user.id, for: app))]
        let requested = try await store.session(id: view.session.id)?.claims.flatMap { try? ClaimsRequest.parse($0) }
        claims.merge(
            try await profileClaims(
                user: view.user, scopes: scopes, named: Set(requested.map { Array($0.userinfo.keys) } ?? []))
        ) { _, new in new }
        // Signed, for an app that registered userinfo_signed_response_alg (Core 5.3.2): a JWT from broker to it.
        if let app, let algorithm = app.userinfoAlgorithm {
            guard let signer = tokens.keys.current.idTokenSigner(algorithm: algorithm) else {
                logger.error("no key for the app's userinfo algorithm", metadata: ["alg": "\(algorithm)"])
                throw APIError.serverError
            }
            claims["iss"] = .string(tokens.issuer)
            claims["aud"] = .string(app.clientID)
            let signed = try signer.sign(claims: claims, type: "JWT")
            return APIResponse(
                status: 200, body: .null,
                headers: [("Content-Type", "application/jwt"), ("Cache-Control", "no-store")],
                html: "", serialized: Array(signed.utf8))
        }
        return APIResponse(status: 200, body: .object(claims), headers: [("Cache-Control", "no-store")])
    }
}
