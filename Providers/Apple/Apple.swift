import AppleSchema
package import BrokerCore
import BrokerCrypto
import BrokerHTTPTypes
import OpenIDConnect
package import ProviderSupport

/// Sign in with Apple: OpenID Connect with Apple's twists. The authorization asks for `name email` with
/// `response_mode=form_post`, so Apple's page posts the answer to the callback — a cross-site POST the broker
/// relays into a GET of its own before anything is checked (SignIn/SignInRoutes), keeping the state and
/// browser-binding rules without SameSite's help. The client secret is an ES256 JWT the module signs for each
/// exchange with the `.p8` key (`iss` the team id, `sub` the Services ID, `aud` Apple, five minutes). The ID
/// token is verified as any (issuer, audience, nonce, expiry, Apple's keys); `email_verified` arrives as a
/// boolean or the string "true"; a private-relay address (`is_private_email`) is a real, verified address that
/// forwards to the person. The name arrives only on the first sign-in, in the form's `user` member, and is
/// kept from then on (the store keeps a name a later sign-in does not send). `is_private_email` and
/// `real_user_status` are recorded with the sign-in. What the configuration accepts: ``AppleSchema``.
package enum Apple {
    package static let id = AppleSchema.id

    package static let descriptor = ProviderDescriptor(
        schema: AppleSchema.schema,
        make: { section, context throws(ProviderError) in try AppleProvider(section, context: context) }
    )
}

/// The Apple module (see ``Apple``).
package final class AppleProvider: IdentityProvider {
    let clientID: String
    let teamID: String
    let signer: JWTSigner
    let authorizationEndpoint: EndpointURL
    let tokenEndpoint: EndpointURL
    /// The OpenID Connect module, for the ID token's checks against Apple's keys.
    let verifier: OpenIDConnectProvider
    let http: @Sendable () -> any HTTPTransport
    let clock: any WallClock

    package var id: ProviderID { Apple.id }
    package var callbackMethod: CallbackMethod { .formPost }

    package init(_ section: ProviderSection, context: ProviderContext) throws(ProviderError) {
        guard let clientID = section.text("client_id"), let teamID = section.text("team_id"),
            let keyID = section.text("key_id")
        else { throw .invalidResponse("providers.apple needs client_id, team_id and key_id") }
        guard let pem = try context.secret(section, "private_key", file: "private_key_file") else {
            throw .invalidResponse("providers.apple needs private_key_file (or private_key)")
        }
        let key: AsymmetricKey
        do {
            key = try AsymmetricKey(pem: pem.exposed)
        } catch {
            throw .invalidResponse("providers.apple's key: \(error)")
        }
        guard key.isPrivate, key.kind == .ecP256, let signer = try? JWTSigner(key: key, kid: keyID) else {
            throw .invalidResponse("providers.apple's key is not an EC P-256 private key (Apple's .p8 files are)")
        }
        self.signer = signer
        self.clientID = clientID
        self.teamID = teamID
        let issuer = section.text("issuer") ?? AppleSchema.defaultIssuer
        authorizationEndpoint = try section.endpoint(
            "authorization_endpoint", default: issuer + "/auth/authorize")
        tokenEndpoint = try section.endpoint("token_endpoint", default: issuer + "/auth/token")
        var configuration = OpenIDConnectConfiguration(
            id: Apple.id, clientID: clientID, clientSecret: Secret("unused"), issuer: issuer)
        configuration.jwksURI = try section.endpoint("jwks_uri", default: issuer + "/auth/keys")
        verifier = OpenIDConnectProvider(
            configuration: configuration, directory: context.directory, http: context.http, clock: context.clock)
        http = context.http
        clock = context.clock
    }

    package func authorizationURL(for pending: PendingSignIn) async throws(ProviderError) -> String {
        authorizationEndpoint.with(query: [
            ("response_type", "code"), ("response_mode", "form_post"), ("client_id", clientID),
            ("redirect_uri", pending.callbackURL), ("scope", "name email"), ("state", pending.state),
            ("nonce", pending.nonce),
        ])
    }

    /// The client secret for one exchange (Apple accepts up to six months; five minutes is all one needs).
    func clientSecret() throws(ProviderError) -> String {
        let now = clock.seconds()
        do {
            return try signer.sign(claims: [
                "iss": .string(teamID), "iat": .int(now), "exp": .int(now + 300),
                "aud": .string(AppleSchema.clientSecretAudience), "sub": .string(clientID),
            ])
        } catch {
            throw .unavailable("cannot sign the client secret: \(error)")
        }
    }

    package func complete(callback: [String: String], pending: PendingSignIn) async throws(ProviderError) -> Identity {
        // `user_cancelled_authorize` when the person closes Apple's sheet.
        try OAuth2Support.deniedIfError(callback)
        guard let code = callback["code"], !code.isEmpty else {
            throw .invalidResponse("the callback carries neither code nor error")
        }
        let tokens = try await OAuth2Support.postForm(
            tokenEndpoint.url,
            [
                ("client_id", clientID), ("client_secret", try clientSecret()), ("code", code),
                ("grant_type", "authorization_code"), ("redirect_uri", pending.callbackURL),
            ], http: http())
        guard let idToken = tokens["id_token"]?.stringValue else {
            throw .invalidResponse("the token response has no id_token")
        }
        let claims = try await verifier.verify(idToken: idToken, nonce: pending.nonce)
        guard let subject = claims["sub"]?.stringValue, !subject.isEmpty, subject.utf8.count <= 255 else {
            throw .invalidResponse("the ID token has no usable subject")
        }
        let verified = Self.truth(claims["email_verified"])
        let email = verified ? claims["email"]?.stringValue : nil
        var details: [String: String] = [:]
        if claims["is_private_email"] != nil {
            details["is_private_email"] = String(Self.truth(claims["is_private_email"]))
        }
        if case .int(let status)? = claims["real_user_status"], (0...2).contains(status) {
            details["real_user_status"] = ["unsupported", "unknown", "likely_real"][Int(status)]
        }
        return Identity(
            subject: subject, email: email, emailVerified: email != nil, name: Self.name(fromUser: callback["user"]),
            details: details)
    }

    /// Apple's booleans: `true` or the string `"true"`.
    static func truth(_ value: JSONValue?) -> Bool {
        value?.boolValue ?? (value?.stringValue == "true")
    }

    /// The name in the first sign-in's `user` form member: `{"name": {"firstName", "lastName"}, "email"}`. Only the
    /// name is read from it — it is not signed, so the address comes from the ID token alone.
    package static func name(fromUser text: String?) -> String? {
        guard let text, text.utf8.count <= 4096, let name = JSONValue.parse(Array(text.utf8))?["name"] else {
            return nil
        }
        let parts = [name["firstName"]?.stringValue, name["lastName"]?.stringValue].compactMap { part in
            part.map { String($0.split(whereSeparator: \.isWhitespace).joined(separator: " ").prefix(100)) }
                .flatMap { $0.isEmpty ? nil : $0 }
        }
        return parts.isEmpty ? nil : parts.joined(separator: " ")
    }
}
