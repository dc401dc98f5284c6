import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging

extension BrokerService {
    /// Refresh tokens are 256-bit random values, base64url: 43 characters.
    static let refreshTokenLength = 43

    /// Starts a session: a session record, its first refresh token (stored only as its SHA-256), and an
    /// access token. Returns the contract's session response.
    func startSession(user: UserRecord, clientID: String, scope: String?) async throws -> JSONValue {
        try await startSessionReturningID(user: user, clientID: clientID, scope: scope).body
    }

    /// ``startSession(user:clientID:scope:)`` that also returns the new session's id.
    func startSessionReturningID(user: UserRecord, clientID: String, scope: String?) async throws
        -> (body: JSONValue, sessionID: String)
    {
        let issuedAt = now
        let sessionID = try SecureRandom.token(byteCount: 16)
        let refreshToken = try SecureRandom.token(byteCount: 32)
        try await store.createSession(
            SessionRecord(
                id: sessionID,
                userID: user.id,
                clientID: clientID,
                scope: scope,
                createdAt: issuedAt,
                revokedAt: nil
            ),
            firstToken: RefreshTokenRecord(
                hash: Digest.sha256(refreshToken),
                sessionID: sessionID,
                createdAt: issuedAt,
                expiresAt: issuedAt + configuration.refreshTokenTTL
            )
        )
        let access = try accessToken(user: user, sessionID: sessionID, clientID: clientID, scope: scope, now: issuedAt)
        return (sessionBody(user: user, accessToken: access, refreshToken: refreshToken), sessionID)
    }

    func sessionBody(user: UserRecord, accessToken: String, refreshToken: String?) -> JSONValue {
        var body: [String: JSONValue] = [
            "user_id": .string(user.id.description),
            "provider": .string(user.id.provider.rawValue),
            "access_token": .string(accessToken),
            "token_type": "Bearer",
            "expires_in": .int(configuration.accessTokenTTL),
        ]
        if let refreshToken { body["refresh_token"] = .string(refreshToken) }
        return .object(body)
    }

    /// An RFC 9068 access token: header `typ: at+jwt` and `kid`; the contract's claims, plus `sid` (the
    /// session, so that revoking it ends its access tokens too).
    func accessToken(user: UserRecord, sessionID: String?, clientID: String, scope: String?, now: Int64) throws
        -> String
    {
        var claims: [String: JSONValue] = [
            "iss": .string(issuer),
            "sub": .string(user.id.description),
            "aud": .string(configuration.audience),
            "iat": .int(now),
            "nbf": .int(now),
            "exp": .int(now + configuration.accessTokenTTL),
            "jti": .string(try SecureRandom.token(byteCount: 16)),
            "idp": .string(user.id.provider.rawValue),
            "client_id": .string(clientID),
        ]
        if let sessionID { claims["sid"] = .string(sessionID) }
        if let email = user.email { claims["email"] = .string(email) }
        if let name = user.name { claims["name"] = .string(name) }
        if let scope { claims["scope"] = .string(scope) }
        return try keys.current.signer.sign(claims: claims, type: "at+jwt")
    }

    /// `POST /auth/token`.
    func token(_ input: RequestInput, authorization: String? = nil) async throws -> APIResponse {
        let grantType = try input.string("grant_type")
        switch grantType {
        case "refresh_token": return try await refresh(input)
        case "client_credentials": return try await clientCredentials(input, authorization: authorization)
        case Self.tokenExchangeGrant: return try await tokenExchange(input, authorization: authorization)
        case "authorization_code": return try await authorizationCode(input)
        case "urn:ietf:params:oauth:grant-type:device_code":
            throw APIError.unsupportedGrantType("grant_type \(grantType) is not enabled on this broker")
        default:
            throw APIError.unsupportedGrantType("unknown grant_type \"\(grantType.prefix(100))\"")
        }
    }

    /// The refresh grant: rotation, and reuse detection that revokes the whole session (RFC 9700 §4.14.2).
    func refresh(_ input: RequestInput) async throws -> APIResponse {
        let presented = try input.string("refresh_token")
        guard presented.utf8.count == Self.refreshTokenLength, Base64URL.decode(presented) != nil else {
            throw APIError.invalidGrant("the refresh token is not one this broker issued")
        }
        let next = try SecureRandom.token(byteCount: 32)
        let time = now
        let outcome = try await store.rotateRefreshToken(
            hash: Digest.sha256(presented),
            nextHash: Digest.sha256(next),
            nextExpiresAt: time + configuration.refreshTokenTTL,
            now: time
        )
        switch outcome {
        case .rotated(let session):
            guard let user = try await store.user(id: session.userID) else {
                throw APIError.invalidGrant("the account of this session no longer exists")
            }
            let access = try accessToken(
                user: user,
                sessionID: session.id,
                clientID: session.clientID,
                scope: session.scope,
                now: time
            )
            return .tokens(sessionBody(user: user, accessToken: access, refreshToken: next))
        case .unknown:
            throw APIError.invalidGrant("the refresh token is not valid")
        case .expired:
            throw APIError.invalidGrant("the refresh token has expired; sign in again")
        case .revoked:
            throw APIError.invalidGrant("the session has been revoked; sign in again")
        case .reused(let sessionID):
            logger.warning(
                "refresh token reused: session revoked",
                metadata: ["broker.session": "\(sessionID.prefix(8))"]
            )
            throw APIError.invalidGrant("the refresh token was already used; the session has been revoked")
        }
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
        if token.utf8.count == Self.refreshTokenLength && !token.contains(".") {
            try await store.revokeSession(byRefreshTokenHash: Digest.sha256(token), now: now)
        } else if token.contains("."),
            let verified = try? verifier().verify(token, now: now),
            let sessionID = verified["sid"]?.stringValue
        {
            try await store.revokeSession(id: sessionID, now: now)
        }
        return APIResponse(status: 200, body: .object([:]), headers: [("Cache-Control", "no-store")])
    }

    func verifier() -> JWTVerifier {
        JWTVerifier(
            keys: keys.current.keySet,
            options: JWTVerifier.Options(issuer: issuer, audience: configuration.audience, expectedType: "at+jwt")
        )
    }

    /// `GET /auth/me`: who the bearer of a valid, unrevoked access token is.
    func me(authorization: String?) async throws -> APIResponse {
        guard let authorization else {
            throw APIError.invalidToken("an Authorization: Bearer access token is required")
        }
        let parts = authorization.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw APIError.invalidToken("the Authorization header must be \"Bearer <access token>\"")
        }
        let token = String(parts[1]).trimmingWhitespace()
        let verified: VerifiedJWT
        do {
            verified = try verifier().verify(token, now: now)
        } catch {
            throw APIError.invalidToken("the access token is not valid: \(error)")
        }
        if let subject = verified.subject, subject.hasPrefix("client:") {
            return try await clientIdentity(verified, subject: subject)
        }
        guard let subject = verified.subject, let userID = UserID(subject) else {
            throw APIError.invalidToken("the access token has no valid subject")
        }
        guard let sessionID = verified["sid"]?.stringValue,
            let (session, user) = try await store.sessionWithUser(id: sessionID),
            session.userID == userID
        else {
            throw APIError.invalidToken("the access token's session does not exist")
        }
        guard session.revokedAt == nil else { throw APIError.invalidToken("the access token has been revoked") }
        var body: [String: JSONValue] = [
            "user_id": .string(user.id.description),
            "provider": .string(user.id.provider.rawValue),
        ]
        if let email = user.email { body["email"] = .string(email) }
        if let name = user.name { body["name"] = .string(name) }
        return APIResponse(status: 200, body: .object(body), headers: [("Cache-Control", "no-store")])
    }
}
