import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore

/// `POST /auth/introspect` (RFC 7662, issue "Logout everywhere…" item 3): a resource server that prefers asking
/// to verifying learns whether a token is live, and whose it is. Only confidential clients may ask — an app
/// with a secret, or a CI client with one — and only about tokens meant for them (RT3-6): a refresh token only
/// to the client it was issued to; an access token only to a client entitled to its audience — an app to its
/// own (`aud` = its client id), a CI client (an operator's resource server) to the APIs' audience and its own
/// name, or a registered resource (`broker resource add`). Every other token, and every token that is not live (revoked, expired, spent, foreign, malformed), is
/// simply `{"active": false}`: asking is no oracle for the liveness of other clients' tokens.
extension AppTokenService {
    /// Who asks: an app, or a CI client.
    enum ResourceServer {
        case app(String)
        case client(String)

        var id: String {
            switch self {
            case .app(let id), .client(let id): id
            }
        }
    }

    func introspect(_ input: RequestInput, authorization: String?, clients: ClientService) async throws
        -> APIResponse
    {
        let asking = try await authenticateResourceServer(input, authorization: authorization, clients: clients)
        let token = try input.string("token")
        let inactive = APIResponse(status: 200, body: ["active": false], headers: [("Cache-Control", "no-store")])
        var claims: [String: JSONValue]
        if token.utf8.count == TokenIssuer.refreshTokenLength && !token.contains("."),
            Base64URL.decode(token) != nil
        {
            guard let (record, spent) = try await store.refreshToken(hash: Digest.sha256(token)), !spent,
                record.expiresAt > now, let view = try await store.sessionWithUser(id: record.sessionID),
                view.session.revokedAt == nil, view.session.clientID == asking.id
            else { return inactive }
            let app = try await store.app(clientID: view.session.clientID)
            claims = [
                "token_type": "refresh_token", "sub": .string(tokens.subject(of: view.user.id, for: app)),
                "client_id": .string(view.session.clientID), "iat": .int(record.createdAt),
                "exp": .int(record.expiresAt),
            ]
            if let scope = view.session.scope { claims["scope"] = .string(scope) }
            if let jkt = view.session.dpopJKT { claims["cnf"] = ["jkt": .string(jkt)] }
        } else {
            guard let verified = try? await verifiedForIntrospection(token, asking: asking) else { return inactive }
            // A user's token lives with its session; a CI client's with the client.
            if let subject = verified.subject, subject.hasPrefix("client:") {
                guard try await store.client(name: String(subject.dropFirst("client:".count))) != nil else {
                    return inactive
                }
            } else {
                do {
                    _ = try await tokens.session(of: verified)
                } catch {
                    return inactive
                }
            }
            // A DPoP-bound token says so, with its key's thumbprint: the resource server checks the proof
            // (RFC 9449 §6.2).
            claims = ["token_type": verified["cnf"]?["jkt"] == nil ? "Bearer" : "DPoP"]
            for name in ["sub", "client_id", "scope", "exp", "iat", "nbf", "aud", "iss", "jti", "sid", "idp", "cnf"] {
                if let value = verified.claims[name] { claims[name] = value }
            }
        }
        claims["active"] = true
        return APIResponse(status: 200, body: .object(claims), headers: [("Cache-Control", "no-store")])
    }

    /// `token` verified as one of the broker's access tokens whose audience `asking` is entitled to; throws
    /// otherwise.
    private func verifiedForIntrospection(_ token: String, asking: ResourceServer) async throws -> VerifiedJWT {
        let verified = try tokens.anyAudienceVerifier().verify(token, now: now)
        let audiences: [String]
        switch verified.claims["aud"] {
        case .string(let one)?: audiences = [one]
        case .array(let many)?: audiences = many.compactMap(\.stringValue)
        default: audiences = []
        }
        let entitled: Bool
        switch asking {
        case .app(let id): entitled = audiences.contains(id)
        case .client(let name):
            // An operator's resource server: the APIs' audience, its own name, or a registered resource (RFC 8707
            // — an API registered with `broker resource add` introspects with a CI client's credentials).
            // The store is asked only when the token is for neither of the first two.
            var found = audiences.contains(name) || audiences.contains(configuration.audience)
            for audience in audiences where !found { found = try await store.resource(url: audience) != nil }
            entitled = found
        }
        guard entitled, !audiences.contains(tokens.accountAudience) else { throw JWTError.audienceMismatch }
        return verified
    }

    /// A confidential app (its secret) or a CI client with a secret; 401 `invalid_client` otherwise.
    private func authenticateResourceServer(_ input: RequestInput, authorization: String?, clients: ClientService)
        async throws -> ResourceServer
    {
        guard let presented = try clients.presentedClient(input, authorization: authorization),
            presented.secret != nil
        else { throw Self.invalidClient }
        if try await app(clientID: presented.id) != nil {
            let app = try await authenticate(input, authorization: authorization)
            guard !app.isPublic else { throw Self.invalidClient }
            return .app(app.clientID)
        }
        do {
            return .client(try await clients.authenticatedClient(presented).name)
        } catch {
            throw Self.invalidClient
        }
    }
}
