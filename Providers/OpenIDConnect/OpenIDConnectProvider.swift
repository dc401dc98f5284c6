package import BrokerCore
package import BrokerCrypto
package import BrokerHTTPTypes
package import ProviderSupport

/// How the client authenticates at the token endpoint (OIDC Core §9).
package enum TokenEndpointAuthentication: Sendable {
    /// `client_secret_basic`: HTTP Basic with the form-urlencoded id and secret (the default).
    case basic
    /// `client_secret_post`: `client_id` and `client_secret` in the body.
    case post
    /// `private_key_jwt` (OIDC Core §9, RFC 7523): a JWT signed with our key, for the token endpoint, instead
    /// of a secret.
    case privateKeyJWT(JWTSigner)
}

/// One OpenID Connect provider's settings: who we are to it and where it lives.
package struct OpenIDConnectConfiguration: Sendable {
    package var id: ProviderID
    package var clientID: String
    package var clientSecret: Secret
    /// Discovery lives at `{issuer}/.well-known/openid-configuration`.
    package var issuer: String
    /// The `iss` values an ID token may carry (Google also uses `accounts.google.com`); default: `issuer`.
    package var acceptedIssuers: Set<String>
    /// Replaces the ``acceptedIssuers`` check when set: Microsoft's issuer is templated by the token's `tid`.
    package var issuerCheck: (@Sendable (_ iss: String, _ claims: [String: JSONValue]) -> Bool)?
    /// Explicit endpoints override discovery.
    package var authorizationEndpoint: EndpointURL?
    package var tokenEndpoint: EndpointURL?
    package var jwksURI: EndpointURL?
    package var scopes: [String] = ["openid", "email", "profile"]
    package var tokenAuthentication: TokenEndpointAuthentication = .basic
    package var extraAuthorizationParameters: [(String, String)] = []
    /// Whether an email without `email_verified: true` still counts as verified (from verified claims).
    package var emailVerified: @Sendable ([String: JSONValue]) -> Bool = {
        $0["email_verified"]?.boolValue ?? ($0["email_verified"]?.stringValue == "true")
    }
    /// Extra checks on verified ID-token claims (Microsoft's tenant rules); a non-`nil` answer refuses.
    package var claimCheck: @Sendable ([String: JSONValue]) -> String? = { _ in nil }
    /// The stable subject from verified claims (default `sub`).
    package var subject: @Sendable ([String: JSONValue]) -> String? = { $0["sub"]?.stringValue }
    /// The claims that carry the person's address and name.
    package var emailClaim = "email"
    package var nameClaim = "name"
    /// Asks the userinfo endpoint (configured, else discovery's) for the address and name when the ID token
    /// lacks them (OIDC Core §5.3); its `sub` must be the ID token's.
    package var userinfoFallback = false
    package var userinfoEndpoint: EndpointURL?
    /// Who may sign in, from the identity and every claim read (the ID token's, then userinfo's): a reason
    /// to refuse, or `nil`. Refused sign-ins end as `access_denied` with the reason.
    package var admit: @Sendable (Identity, [String: JSONValue]) -> String? = { _, _ in nil }
    /// The ID token's accepted clock skew, in seconds.
    package var leeway: Int64 = 120

    package init(id: ProviderID, clientID: String, clientSecret: Secret, issuer: String) {
        self.id = id
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.issuer = issuer
        self.acceptedIssuers = [issuer]
    }
}

/// The shared OpenID Connect module: authorization code + PKCE + nonce + state, the code exchange, and ID
/// token verification against the provider's JWKS (cached; refetched, rate-limited, on an unknown `kid`).
///
/// Users are keyed on the provider's stable subject, never on email or preferred_username (the "nOAuth"
/// account-takeover class); an email is returned only when the provider says it is verified.
package final class OpenIDConnectProvider: IdentityProvider {
    package let configuration: OpenIDConnectConfiguration
    let directory: IssuerDirectory
    let http: @Sendable () -> any HTTPTransport
    let clock: any WallClock

    package var id: ProviderID { configuration.id }

    package init(
        configuration: OpenIDConnectConfiguration,
        directory: IssuerDirectory,
        http: @escaping @Sendable () -> any HTTPTransport,
        clock: any WallClock
    ) {
        self.configuration = configuration
        self.directory = directory
        self.http = http
        self.clock = clock
    }

    /// An endpoint from the configuration, else from discovery.
    func endpoint(_ key: String, configured: EndpointURL?) async throws(ProviderError) -> String {
        if let configured { return configured.url }
        let metadata: IssuerDirectory.Metadata
        do {
            metadata = try await directory.metadata(issuer: configuration.issuer, jwksURI: configuration.jwksURI?.url)
        } catch {
            throw .unavailable(error.description)
        }
        guard let url = metadata.document[key]?.stringValue else {
            throw .invalidResponse("the discovery document of \(configuration.issuer) has no \(key)")
        }
        if let problem = Endpoint.problem(url) { throw .invalidResponse("\(key) \(url) \(problem)") }
        return url
    }

    package func authorizationURL(for pending: PendingSignIn) async throws(ProviderError) -> String {
        let base = try await endpoint("authorization_endpoint", configured: configuration.authorizationEndpoint)
        let parameters: [(String, String)] =
            [
                ("response_type", "code"),
                ("client_id", configuration.clientID),
                ("redirect_uri", pending.callbackURL),
                ("scope", configuration.scopes.joined(separator: " ")),
                ("state", pending.state),
                ("nonce", pending.nonce),
                ("code_challenge", PKCE.challenge(for: pending.codeVerifier)),
                ("code_challenge_method", "S256"),
            ] + configuration.extraAuthorizationParameters
        return base + (base.contains("?") ? "&" : "?") + FormEncoding.encode(parameters)
    }

    package func complete(callback: [String: String], pending: PendingSignIn) async throws(ProviderError) -> Identity {
        if let error = callback["error"] {
            throw .denied(code: error, description: callback["error_description"] ?? "")
        }
        guard let code = callback["code"], !code.isEmpty else {
            throw .invalidResponse("the callback carries neither code nor error")
        }
        let tokens = try await exchange(code: code, pending: pending)
        guard let idToken = tokens["id_token"]?.stringValue else {
            throw .invalidResponse("the token response has no id_token")
        }
        var claims = try await verify(idToken: idToken, nonce: pending.nonce)
        guard let subject = configuration.subject(claims), !subject.isEmpty, subject.utf8.count <= 255 else {
            throw .invalidResponse("the ID token has no usable subject")
        }
        let lacking =
            claims[configuration.emailClaim]?.stringValue == nil
            || claims[configuration.nameClaim]?.stringValue == nil
        if configuration.userinfoFallback, lacking, let accessToken = tokens["access_token"]?.stringValue {
            let extra = try await userinfo(accessToken: accessToken, subject: claims["sub"]?.stringValue ?? "")
            if claims[configuration.emailClaim]?.stringValue == nil, let email = extra[configuration.emailClaim] {
                // An address and whether it is verified come from the same answer.
                claims[configuration.emailClaim] = email
                claims["email_verified"] = extra["email_verified"] ?? .null
            }
            if claims[configuration.nameClaim]?.stringValue == nil, let name = extra[configuration.nameClaim] {
                claims[configuration.nameClaim] = name
            }
        }
        let verified = configuration.emailVerified(claims)
        let email = verified ? claims[configuration.emailClaim]?.stringValue : nil
        let identity = Identity(
            subject: subject,
            email: email,
            emailVerified: verified && email != nil,
            name: claims[configuration.nameClaim]?.stringValue,
            profile: Identity.profile(from: claims)
        )
        if let refusal = configuration.admit(identity, claims) {
            throw .denied(code: "access_denied", description: refusal)
        }
        return identity
    }

    /// The userinfo endpoint's claims for `accessToken`, which must be about `subject` (OIDC Core §5.3.2).
    func userinfo(accessToken: String, subject: String) async throws(ProviderError) -> [String: JSONValue] {
        let url: String
        if let configured = configuration.userinfoEndpoint {
            url = configured.url
        } else {
            do throws(ProviderError) {
                url = try await endpoint("userinfo_endpoint", configured: nil)
            } catch {
                // No userinfo endpoint: the ID token is all there is.
                return [:]
            }
        }
        var request = HTTPClientRequest(
            url: url,
            headers: [
                (name: "Authorization", value: "Bearer " + accessToken), (name: "Accept", value: "application/json"),
            ])
        request.maxResponseBytes = 64 * 1024
        let response: HTTPClientResponse
        do {
            response = try await http().send(request)
        } catch {
            throw .unavailable("userinfo endpoint \(url): \(error)")
        }
        guard response.status == 200, let body = JSONValue.parse(response.body)?.objectValue else {
            throw .invalidResponse("the userinfo endpoint answered HTTP \(response.status) without a JSON object")
        }
        guard let sub = body["sub"]?.stringValue, ConstantTime.equals(sub, subject) else {
            throw .invalidResponse("the userinfo answer is about another subject than the ID token")
        }
        return body
    }

    /// The authorization code grant at the token endpoint, with the PKCE verifier.
    func exchange(code: String, pending: PendingSignIn) async throws(ProviderError) -> [String: JSONValue] {
        let url = try await endpoint("token_endpoint", configured: configuration.tokenEndpoint)
        var fields: [(String, String)] = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", pending.callbackURL),
            ("code_verifier", pending.codeVerifier),
        ]
        var headers: [(name: String, value: String)] = []
        switch configuration.tokenAuthentication {
        case .basic:
            headers.append(HTTPBasic.header(id: configuration.clientID, secret: configuration.clientSecret))
        case .post:
            fields.append(("client_id", configuration.clientID))
            fields.append(("client_secret", configuration.clientSecret.exposed))
        case .privateKeyJWT(let signer):
            let now = clock.seconds()
            let assertion: String
            do {
                assertion = try signer.sign(claims: [
                    "iss": .string(configuration.clientID), "sub": .string(configuration.clientID),
                    "aud": .string(url), "jti": .string(try SecureRandom.token(byteCount: 16)), "iat": .int(now),
                    "exp": .int(now + 60),
                ])
            } catch {
                throw .unavailable("cannot sign the client assertion: \(error)")
            }
            fields.append(("client_id", configuration.clientID))
            fields.append(("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"))
            fields.append(("client_assertion", assertion))
        }
        var request = HTTPClientRequest.form(url: url, fields: fields, headers: headers)
        request.maxResponseBytes = 256 * 1024
        let response: HTTPClientResponse
        do {
            response = try await http().send(request)
        } catch {
            throw .unavailable("token endpoint \(url): \(error)")
        }
        let body = JSONValue.parse(response.body)?.objectValue
        guard response.status == 200, let body else {
            let code = body?["error"]?.stringValue ?? "HTTP \(response.status)"
            let description = body?["error_description"]?.stringValue ?? ""
            throw .invalidResponse("the code exchange was refused: \(code) \(description)")
        }
        return body
    }

    /// Verifies an ID token (OIDC Core §3.1.3.7): signature with the algorithm bound to the provider's key,
    /// `iss` among the accepted issuers, `aud` containing our client id, `azp` (when present, or when
    /// there are several audiences) equal to it, `exp`/`iat`, and the `nonce` of this sign-in.
    package func verify(idToken: String, nonce: String) async throws(ProviderError) -> [String: JSONValue] {
        let kid = Self.headerKeyID(idToken)
        let keys: JWTKeySet
        do {
            keys = try await directory.keys(
                issuer: configuration.issuer, kid: kid, jwksURI: configuration.jwksURI?.url)
        } catch {
            throw .unavailable(error.description)
        }
        var options = JWTVerifier.Options(issuer: nil, audience: configuration.clientID, leeway: configuration.leeway)
        options.requiredClaims = ["iss", "sub", "iat"]
        let verified: VerifiedJWT
        do {
            verified = try JWTVerifier(keys: keys, options: options).verify(idToken, now: clock.seconds())
        } catch {
            throw .invalidResponse("ID token: \(error)")
        }
        let claims = verified.claims
        let issuerAccepted = verified.issuer.map { iss in
            configuration.issuerCheck.map { $0(iss, verified.claims) } ?? configuration.acceptedIssuers.contains(iss)
        }
        guard let issuerAccepted, issuerAccepted else {
            throw .invalidResponse("ID token: unexpected issuer \(verified.issuer?.prefix(200) ?? "(none)")")
        }
        let audiences = claims["aud"]?.arrayValue?.count ?? 1
        if let azp = claims["azp"] {
            guard azp.stringValue == configuration.clientID else {
                throw .invalidResponse("ID token: azp is not our client id")
            }
        } else if audiences > 1 {
            throw .invalidResponse("ID token: several audiences and no azp")
        }
        guard let tokenNonce = claims["nonce"]?.stringValue, ConstantTime.equals(tokenNonce, nonce) else {
            throw .invalidResponse("ID token: the nonce is not this sign-in's")
        }
        if let problem = configuration.claimCheck(claims) { throw .invalidResponse("ID token: \(problem)") }
        return claims
    }

    static func headerKeyID(_ token: String) -> String? {
        guard let dot = token.utf8.firstIndex(of: UInt8(ascii: ".")) else { return nil }
        let header = token.utf8[..<dot]
        guard header.count <= 4096, let bytes = Base64URL.decode(header) else { return nil }
        return JSONValue.parse(bytes)?["kid"]?.stringValue
    }
}
