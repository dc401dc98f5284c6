import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging
import ProviderSupport

/// CI minting: the `client_credentials` grant (RFC 6749 §4.4) and OAuth 2.0 Token Exchange (RFC 8693) of a
/// CI platform's OIDC token. Both issue a short-lived access token with `sub: client:<name>` and no refresh
/// token.
package final class ClientService: ContextualService {
    package let context: ServiceContext
    /// Client secrets are stored as keyed hashes (``ClientSecretHasher``).
    package let clientSecrets: ClientSecretHasher
    /// Compared against when a client id is unknown, so that it costs what a wrong secret costs.
    let dummyClientSecretHash: String
    /// The keys of the CI platforms that clients trust for token exchange.
    let trustedKeys: IssuerDirectory

    init(
        context: ServiceContext, clientSecrets: ClientSecretHasher,
        trustedKeys: IssuerDirectory
    ) throws {
        self.context = context
        self.clientSecrets = clientSecrets
        self.trustedKeys = trustedKeys
        dummyClientSecretHash = clientSecrets.hash(try ClientSecretHasher.newSecret())
    }

    static let tokenExchangeGrant = "urn:ietf:params:oauth:grant-type:token-exchange"
    static let accessTokenType = "urn:ietf:params:oauth:token-type:access_token"
    static let subjectTokenTypes: Set<String> = [
        "urn:ietf:params:oauth:token-type:jwt", "urn:ietf:params:oauth:token-type:id_token",
    ]
    /// The lifetime of a minted token when the request names none (CONTRACT.md).
    static let defaultMintTTL: Int64 = 600

    /// How the client authenticated: HTTP Basic (client_secret_basic) or body parameters (client_secret_post).
    struct PresentedClient {
        let id: String
        let secret: Secret?
    }

    /// Reads the client id and secret from `Authorization: Basic` or from the body; using both is an error
    /// (RFC 6749 §2.3: "MUST NOT use more than one authentication method in each request").
    func presentedClient(_ input: RequestInput, authorization: String?) throws(APIError) -> PresentedClient? {
        let bodyID = try input.optionalString("client_id")
        let bodySecret = try input.optionalString("client_secret")
        if let authorization {
            guard let field = AuthorizationCredentials(authorization), field.isScheme("basic") else {
                throw APIError.invalidClient("the Authorization header must be \"Basic <client id:secret>\"")
            }
            // RFC 6749 §2.3.1: id and secret are form-urlencoded, then joined by ":" and base64-encoded.
            guard let (id, secret) = HTTPBasic.credentials(fromToken: field.credentials) else {
                throw APIError.invalidClient("malformed Basic credentials")
            }
            guard bodySecret == nil else {
                throw APIError.invalidRequest(
                    "send the client secret in the Authorization header or the body, not both")
            }
            if let bodyID, bodyID != id {
                throw APIError.invalidRequest("client_id in the body differs from the one in the Authorization header")
            }
            return PresentedClient(id: id, secret: Secret(secret))
        }
        guard let bodyID else {
            if bodySecret != nil { throw APIError.invalidRequest("client_secret without client_id") }
            return nil
        }
        return PresentedClient(id: bodyID, secret: bodySecret.map(Secret.init))
    }

    /// The registered client whose secret was presented; the same answer for an unknown client and a wrong
    /// secret, after the same work.
    nonisolated(nonsending) func authenticatedClient(_ presented: PresentedClient) async throws -> ClientRecord {
        guard let secret = presented.secret, !secret.exposed.isEmpty else {
            throw APIError.invalidClient("client_credentials needs the client secret")
        }
        let record = ClientRules.validName(presented.id) ? try await store.client(name: presented.id) : nil
        // A client without a secret (token exchange only) answers like an unknown one, after the same work.
        let matches = clientSecrets.verify(secret, against: record?.secretHash ?? dummyClientSecretHash)
        guard let record, record.secretHash != nil, matches else {
            logger.info("client authentication failed", metadata: ["broker.client": "\(presented.id.prefix(64))"])
            throw APIError.invalidClient("the client id or secret is not right")
        }
        return record
    }

    /// `grant_type=client_credentials`.
    nonisolated(nonsending) func clientCredentials(_ input: RequestInput, authorization: String?) async throws
        -> APIResponse
    {
        guard let presented = try presentedClient(input, authorization: authorization) else {
            throw APIError.invalidClient("client authentication is required (HTTP Basic or client_id + client_secret)")
        }
        let client = try await authenticatedClient(presented)
        return try await mintedResponse(client: client, input: input, federated: nil)
    }

    /// `grant_type=urn:ietf:params:oauth:grant-type:token-exchange`: a JWT from the issuer the client
    /// trusts stands in for the client secret. Every refusal is `invalid_grant` with its reason.
    func tokenExchange(_ input: RequestInput, authorization: String?) async throws -> APIResponse {
        guard let presented = try presentedClient(input, authorization: authorization) else {
            throw APIError.invalidRequest("client_id is required: the CI client that trusts the token's issuer")
        }
        let subjectToken = try input.string("subject_token")
        let subjectTokenType = try input.string("subject_token_type")
        guard Self.subjectTokenTypes.contains(subjectTokenType) else {
            throw APIError.invalidRequest(
                "subject_token_type must be urn:ietf:params:oauth:token-type:jwt or …:id_token")
        }
        if let requested = try input.optionalString("requested_token_type"),
            requested != Self.accessTokenType, requested != "urn:ietf:params:oauth:token-type:jwt"
        {
            throw APIError.invalidRequest("requested_token_type must be an access token")
        }
        if try input.optionalString("actor_token") != nil {
            throw APIError.invalidRequest("delegation (actor_token) is not supported")
        }

        let client: ClientRecord
        if presented.secret != nil {
            client = try await authenticatedClient(presented)
        } else {
            guard ClientRules.validName(presented.id), let found = try await store.client(name: presented.id) else {
                throw refused("no client \(presented.id.prefix(64)) is registered", client: presented.id)
            }
            client = found
        }
        guard let trust = client.trust else {
            throw refused("client \(client.name) trusts no issuer; use client_credentials", client: client.name)
        }

        // The unverified header and issuer only decide which keys to fetch; everything is verified below.
        let (kid, claimedIssuer) = Self.peek(subjectToken)
        if let claimedIssuer, claimedIssuer != trust.issuer {
            throw refused(
                "the subject token is from \(claimedIssuer.prefix(200)), not the trusted issuer \(trust.issuer)",
                client: client.name)
        }
        let keys: JWTKeySet
        do {
            keys = try await trustedKeys.keys(issuer: trust.issuer, kid: kid)
        } catch {
            throw refused("cannot verify the subject token: \(error)", client: client.name)
        }
        var options = JWTVerifier.Options(issuer: trust.issuer, audience: trust.audience)
        options.requiredClaims = ["sub", "jti", "iat"]
        options.maxAge = trust.maxAge
        let verified: VerifiedJWT
        do {
            verified = try JWTVerifier(keys: keys, options: options).verify(subjectToken, now: now)
        } catch {
            throw refused("the subject token is not valid: \(error)", client: client.name)
        }
        guard let subject = verified.subject, ClientRules.subject(subject, matches: trust.subjectPattern) else {
            throw refused(
                "the subject token's sub \"\(verified.subject?.prefix(200) ?? "")\" does not match "
                    + "\"\(trust.subjectPattern)\"",
                client: client.name)
        }
        guard let jti = verified.jwtID, !jti.isEmpty, jti.utf8.count <= 256, let expiry = verified.expiresAt else {
            throw refused("the subject token's jti is empty or too long", client: client.name)
        }
        // Kept until the token could no longer be accepted anyway (exp plus the leeway).
        guard try await store.recordExchange(issuer: trust.issuer, jti: jti, expiresAt: expiry + options.leeway)
        else {
            throw refused("the subject token (jti \(jti.prefix(64))) has already been exchanged", client: client.name)
        }
        let response = try await mintedResponse(
            client: client,
            input: input,
            federated: .object(["iss": .string(trust.issuer), "sub": .string(subject)]),
            issuedTokenType: Self.accessTokenType
        )
        logger.info(
            "token exchanged",
            metadata: ["broker.client": "\(client.name)", "broker.federated_sub": "\(subject.prefix(200))"]
        )
        return response
    }

    private func refused(_ reason: String, client: String) -> APIError {
        logger.info(
            "token exchange refused", metadata: ["broker.client": "\(client.prefix(64))", "reason": "\(reason)"])
        return APIError.invalidGrant(reason)
    }

    /// The `kid` header and `iss` claim of a compact JWT, unverified; `nil`s when it does not parse (the
    /// verifier then says why).
    static func peek(_ token: String) -> (kid: String?, issuer: String?) {
        guard token.utf8.count <= 16 * 1024, let jwt = UnverifiedJWT(token) else { return (nil, nil) }
        return (jwt.header?["kid"]?.stringValue, jwt.claims?["iss"]?.stringValue)
    }

    /// Issues the access token of a CI client: requested scopes ∩ allowed, the requested lifetime capped by
    /// `mint_max_ttl`, the requested audience or the broker's — or, with `resource` (RFC 8707), that registered
    /// resource's.
    func mintedResponse(
        client: ClientRecord, input: RequestInput, federated: JSONValue?, issuedTokenType: String? = nil
    ) async throws -> APIResponse {
        var ttl = Self.defaultMintTTL
        switch input.fields["ttl"] {
        case nil, .null?: break
        case .string(let text)?:
            // Forms carry numbers as text.
            guard let requested = Int64(text), requested >= 1 else {
                throw APIError.invalidRequest("ttl must be a whole number of seconds, at least 1")
            }
            ttl = requested
        case let value?:
            guard let requested = value.intValue, requested >= 1 else {
                throw APIError.invalidRequest("ttl must be a whole number of seconds, at least 1")
            }
            ttl = requested
        }
        ttl = min(ttl, configuration.mintMaxTTL)

        var scope: String?
        if let requested = try input.optionalString("scope") {
            let wanted = requested.split(separator: " ").map(String.init)
            let granted = wanted.filter(client.scopes.contains)
            guard !granted.isEmpty || wanted.isEmpty else {
                throw APIError(
                    status: 400, code: .invalidScope,
                    detail: "client \(client.name) may not have any of the requested scopes")
            }
            scope = granted.isEmpty ? nil : granted.joined(separator: " ")
        } else if !client.scopes.isEmpty {
            scope = client.scopes.joined(separator: " ")
        }

        let resource = try await ResourceIndicators.named(try input.optionalString("resource"), store: store)
        let named = try input.optionalString("audience")
        if let resource, let named, named != resource.url {
            throw APIError.invalidRequest("audience and resource name different APIs; send one")
        }
        let audience = resource?.url ?? named ?? configuration.audience
        guard !audience.isEmpty, resource != nil || audience.utf8.count <= 256 else {
            throw APIError.invalidRequest("audience must be 1–256 characters")
        }

        let token = try tokens.clientAccessToken(
            client: client.name, audience: audience, lifetime: ttl, scope: scope, federated: federated, now: now)
        // The session response's shape (a client is its own user, `client:<name>`), as BrokerCore writes it.
        let answer = TokenResponse(
            userID: UserID(provider: "client", subject: client.name), provider: "client", accessToken: token,
            tokenType: TokenIssuer.tokenType, expiresIn: ttl, scope: scope, issuedTokenType: issuedTokenType)
        return .tokens(answer.json)
    }

    /// `/auth/me` for a minted token: valid while its client is still registered — the very client that
    /// minted it, not a later one of the same name (tokens issued before the client was created are refused).
    nonisolated(nonsending) func clientIdentity(_ verified: VerifiedJWT, subject: String) async throws -> APIResponse {
        let name = String(subject.dropFirst("client:".count))
        guard verified["sid"] == nil, verified["client_id"]?.stringValue == name, ClientRules.validName(name),
            let client = try await store.client(name: name)
        else {
            throw APIError.invalidToken("the access token's client is not registered")
        }
        guard let issuedAt = verified.issuedAt, issuedAt >= client.createdAt else {
            throw APIError.invalidToken("the access token was issued before its client was (re)created")
        }
        var body: [String: JSONValue] = [
            "user_id": .string(subject),
            "provider": "client",
            "client_id": .string(name),
        ]
        if let federated = verified["federated"] { body["federated"] = federated }
        if let scope = verified["scope"] { body["scope"] = scope }
        return APIResponse(status: 200, body: .object(body), headers: [("Cache-Control", "no-store")])
    }
}
