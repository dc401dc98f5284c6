package import BrokerCore
package import BrokerCrypto
package import BrokerHTTP

/// What went wrong talking to the broker.
package enum BrokerAPIError: Error, Sendable, CustomStringConvertible {
    /// The broker answered with its JSON error (`error`, `error_description`).
    case rejected(status: Int, code: OAuthErrorCode, description: String)
    /// No answer: connection refused, DNS, TLS, timeout.
    case unreachable(String)
    /// An answer that is not what the contract says.
    case badResponse(String)

    package var description: String {
        switch self {
        case .rejected(let status, let code, let description):
            return description.isEmpty ? "\(code) (HTTP \(status))" : "\(description) (\(code))"
        case .unreachable(let message): return "cannot reach the broker: \(message)"
        case .badResponse(let message): return "unexpected answer from the broker: \(message)"
        }
    }

    /// The broker refused the credentials or token itself (as opposed to failing or being unreachable).
    package var isAuthenticationRefusal: Bool {
        if case .rejected(let status, let code, _) = self {
            // A step-up challenge (RFC 9470) is a session that is good but not strong enough: it is kept.
            if code == .insufficientUserAuthentication { return false }
            return status == 401 || OAuthErrorCode.sessionRefusals.contains(code)
        }
        return false
    }
}

/// The session shape every sign-in endpoint answers with (CONTRACT.md "A session response").
package struct SessionResponse: Sendable {
    package var userID: UserID
    package var provider: ProviderID
    package var accessToken: Secret
    package var expiresIn: Int64
    package var refreshToken: Secret?

    package func session(key: SessionKey, now: Int64) -> Session {
        Session(
            key: key,
            userID: userID,
            provider: provider,
            accessToken: accessToken,
            expiresAt: now + expiresIn,
            refreshToken: refreshToken,
            obtainedAt: now
        )
    }
}

/// A minted CI token (no refresh token): the broker's answer, read as the server wrote it.
package struct MintedToken: Sendable {
    package var response: TokenResponse
    package var accessToken: Secret { Secret(response.accessToken) }
    package var expiresIn: Int64 { response.expiresIn }
}

/// One provider as `/auth/providers` lists it.
package struct ProviderInfo: Sendable {
    package var id: String
    package var name: String
    package var flow: String
}

/// The broker's HTTP API, from the client's side, on the libcurl client.
package struct BrokerAPI: Sendable {
    package let baseURL: String
    /// `nil`: `HTTPClient.shared`, reached only when a request is sent — creating it initializes libcurl,
    /// which `broker token`'s warm path never needs.
    let client: (any HTTPTransport)?
    /// Per request (`http_timeout`, `BROKER_HTTP_TIMEOUT`); `logout` and `whoami` wait at most a few seconds, so an
    /// unreachable broker does not hold the user up.
    package var timeout: Duration = .seconds(30)
    /// The profile's DPoP key (``DPoPKeyStore``): with it, requests that issue tokens carry a proof (and the
    /// tokens are bound to the key), and a bound token goes to `/auth/me` as `DPoP` with a proof.
    package var proofKey: AsymmetricKey? {
        get { proofKeySource?.key }
        set { proofKeySource = newValue.map { key in ProofKeySource { key } } }
    }
    /// Where ``proofKey`` comes from: read at the first request that needs it.
    package var proofKeySource: ProofKeySource?
    /// The wall clock for proofs' `iat`.
    package var clock: any WallClock = SystemClock()

    /// The broker paths that issue tokens: a proof goes with every request to them (and with every request that
    /// presents a bound token).
    static let proofPaths: Set<String> = ["/auth/token", "/auth/login", "/auth/register"]

    /// The `Authorization` value for `accessToken`: `DPoP` for a bound one (with a proof beside it), else `Bearer`.
    func authorization(_ accessToken: Secret) -> String {
        (proofKey != nil && isDPoPBound(accessToken) ? "DPoP " : "Bearer ") + accessToken.exposed
    }

    package init(baseURL: String, http: (any HTTPTransport)? = nil) {
        self.baseURL = baseURL
        self.client = http
    }

    /// What a registration gave: a session, or — when the broker requires confirmed addresses — none yet.
    package enum Registration: Sendable {
        /// Signed in; `verificationSent`: the broker mailed a confirmation link too.
        case session(SessionResponse, verificationSent: Bool)
        /// The account exists; signing in waits for the mailed link to be followed.
        case awaitingVerification(UserID)
        /// The broker does not say whether the address had an account (`server.enumeration_protection`): it
        /// mailed the address either a confirmation link or a note on how to sign in.
        case mailed
        /// The account exists; the broker requires a second factor before any sign-in (`server.require_mfa`).
        case awaitingSecondFactor(UserID)
    }

    package func register(email: String, password: Secret, name: String?) async throws(BrokerAPIError)
        -> Registration
    {
        var body: [String: JSONValue] = ["email": .string(email), "password": .string(password.exposed)]
        if let name { body["name"] = .string(name) }
        let document = try await postJSON(
            "/auth/register", body: .object(body), accepting: [201, 202], timeout: Self.passwordTimeout)
        if document["access_token"] == nil, document["user_id"] == nil, document["status"]?.stringValue == "accepted" {
            return .mailed
        }
        let sent = document["verification"]?.stringValue == "sent"
        if document["access_token"] == nil, document["mfa"]?.stringValue == "required",
            let user = document["user_id"]?.stringValue.flatMap(UserID.init)
        {
            return .awaitingSecondFactor(user)
        }
        if document["access_token"] == nil, sent, let user = document["user_id"]?.stringValue.flatMap(UserID.init) {
            return .awaitingVerification(user)
        }
        return .session(try Self.session(from: document), verificationSent: sent)
    }

    /// `POST /auth/verify/resend`: a new confirmation link if an unconfirmed account uses the address (202 always).
    package func resendVerification(email: String) async throws(BrokerAPIError) -> JSONValue {
        try await postJSON("/auth/verify/resend", body: ["email": .string(email)], expect: 202)
    }

    /// `POST /auth/login`; `otp`: the second factor's code, for an account that has one (the broker answers
    /// 401 `mfa_required` without it).
    package func login(email: String, password: Secret, otp: Secret? = nil) async throws(BrokerAPIError)
        -> SessionResponse
    {
        var fields: [String: JSONValue] = ["email": .string(email), "password": .string(password.exposed)]
        if let otp { fields["otp"] = .string(otp.exposed) }
        let body = JSONValue.object(fields)
        return try Self.session(
            from: await postJSON("/auth/login", body: body, expect: 200, timeout: Self.passwordTimeout))
    }

    /// The refresh grant. `scope: "account"` asks for an account token instead of an API access token: what the
    /// broker's account endpoints (link, unlink, password change, account delete and export) accept.
    /// `resource` (RFC 8707): an access token for that API alone (its `aud`), which the broker must have
    /// registered.
    package func refresh(_ refreshToken: Secret, scope: String? = nil, resource: String? = nil)
        async throws(BrokerAPIError) -> SessionResponse
    {
        var fields = [("grant_type", "refresh_token"), ("refresh_token", refreshToken.exposed)]
        if let scope { fields.append(("scope", scope)) }
        if let resource { fields.append(("resource", resource)) }
        let request = HTTPClientRequest.form(url: baseURL + "/auth/token", fields: fields)
        return try Self.session(from: await send(request, expect: 200))
    }

    /// Redeems the browser flow's one-time code with the PKCE verifier (`grant_type=authorization_code`).
    package func redeem(code: String, verifier: String, redirectURI: String) async throws(BrokerAPIError)
        -> SessionResponse
    {
        let request = HTTPClientRequest.form(
            url: baseURL + "/auth/token",
            fields: [
                ("grant_type", "authorization_code"), ("code", code), ("code_verifier", verifier),
                ("redirect_uri", redirectURI),
            ]
        )
        return try Self.session(from: await send(request, expect: 200))
    }

    /// `POST /auth/device` (RFC 8628 §3.1): a device code for the CLI, a user code for the person.
    package func deviceAuthorization(provider: ProviderID?, linkingAs: Secret? = nil) async throws(BrokerAPIError)
        -> DeviceStart
    {
        var fields = [("client_id", "broker-cli")]
        if let provider { fields.append(("provider", provider.rawValue)) }
        var headers: [(name: String, value: String)] = []
        if let linkingAs {
            fields.append(("purpose", "link"))
            headers.append((name: "Authorization", value: "Bearer " + linkingAs.exposed))
        }
        let document = try await send(
            .form(url: baseURL + "/auth/device", fields: fields, headers: headers), expect: 200)
        let start: DeviceAuthorizationResponse
        do {
            start = try DeviceAuthorizationResponse(json: document)
        } catch {
            throw .badResponse(error.description)
        }
        return DeviceStart(
            deviceCode: Secret(start.deviceCode), userCode: start.userCode, verificationURI: start.verificationURI,
            verificationURIComplete: start.verificationURIComplete, expiresIn: start.expiresIn,
            interval: start.interval)
    }

    /// One poll of the device code (RFC 8628 §3.4): the session once approved, else the broker's refusal
    /// (`authorization_pending`, `slow_down`, `access_denied`, `expired_token`, …) as ``BrokerAPIError/rejected``.
    package func pollDevice(_ deviceCode: Secret) async throws(BrokerAPIError) -> SessionResponse {
        let request = HTTPClientRequest.form(
            url: baseURL + "/auth/token",
            fields: [
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", deviceCode.exposed),
                ("client_id", "broker-cli"),
            ])
        return try Self.session(from: await send(request, expect: 200))
    }

    /// RFC 7009: the broker answers 200 whether or not it knew the token.
    package func revoke(_ token: Secret) async throws(BrokerAPIError) {
        let request = HTTPClientRequest.form(url: baseURL + "/auth/revoke", fields: [("token", token.exposed)])
        _ = try await send(request, expect: 200)
    }

    package func providers() async throws(BrokerAPIError) -> (list: [ProviderInfo], document: JSONValue) {
        let document = try await send(
            HTTPClientRequest(url: baseURL + "/auth/providers", headers: Self.accept), expect: 200)
        let response: ProvidersResponse
        do {
            response = try ProvidersResponse(json: document)
        } catch {
            throw .badResponse(error.description)
        }
        let list = response.providers.map { ProviderInfo(id: $0.id, name: $0.name, flow: $0.flow) }
        return (list, document)
    }

    /// `GET /auth/me` with the access token.
    package func me(_ accessToken: Secret) async throws(BrokerAPIError) -> JSONValue {
        let request = HTTPClientRequest(
            url: baseURL + "/auth/me",
            headers: Self.accept + [(name: "Authorization", value: authorization(accessToken))]
        )
        return try await send(request, expect: 200, presenting: accessToken)
    }

    /// `POST /auth/account/delete` with the session's token (and the password, for a custom account).
    package func deleteAccount(_ accessToken: Secret, password: Secret?) async throws(BrokerAPIError) -> JSONValue {
        var body: [String: JSONValue] = [:]
        if let password { body["password"] = .string(password.exposed) }
        return try await postAuthorized("/auth/account/delete", body: .object(body), accessToken)
    }

    /// `GET /auth/identities`: the signed-in user's ways in (`{"user_id", "identities": […]}`).
    package func identities(_ accessToken: Secret) async throws(BrokerAPIError) -> JSONValue {
        let request = HTTPClientRequest(
            url: baseURL + "/auth/identities",
            headers: Self.accept + [(name: "Authorization", value: authorization(accessToken))])
        return try await send(request, expect: 200, presenting: accessToken)
    }

    /// `POST /auth/link` for a browser provider: a ticket for `/auth/{provider}/start`, bound to `challenge`.
    package func linkTicket(_ accessToken: Secret, provider: ProviderID, challenge: String)
        async throws(BrokerAPIError) -> String
    {
        let answer = try await postAuthorized(
            "/auth/link",
            body: ["provider": .string(provider.rawValue), "code_challenge": .string(challenge)], accessToken)
        guard let ticket = answer["link_ticket"]?.stringValue, !ticket.isEmpty else {
            throw .badResponse("the link answer carries no link_ticket")
        }
        return ticket
    }

    /// `POST /auth/link` for `custom`: adds an email + password way in to the signed-in user (201).
    package func linkPassword(_ accessToken: Secret, email: String, password: Secret) async throws(BrokerAPIError)
        -> JSONValue
    {
        try await postAuthorized(
            "/auth/link",
            body: ["provider": "custom", "email": .string(email), "password": .string(password.exposed)],
            accessToken, accepting: [201, 202])
    }

    /// `POST /auth/unlink {"provider"}`.
    package func unlink(_ accessToken: Secret, provider: ProviderID) async throws(BrokerAPIError) -> JSONValue {
        try await postAuthorized("/auth/unlink", body: ["provider": .string(provider.rawValue)], accessToken)
    }

    /// A JSON POST with an account token (``SessionService/accountToken()``), given the time a password check
    /// takes.
    private func postAuthorized(
        _ path: String, body: JSONValue, _ accessToken: Secret, accepting statuses: Set<Int> = [200]
    ) async throws(BrokerAPIError) -> JSONValue {
        var api = self
        api.timeout = max(api.timeout, Self.passwordTimeout)
        let request = HTTPClientRequest(
            method: "POST", url: baseURL + path,
            headers: Self.accept + [
                (name: "Content-Type", value: "application/json"),
                (name: "Authorization", value: "Bearer " + accessToken.exposed),
            ],
            body: body.serializedBytes)
        return try await api.send(request, accepting: statuses)
    }

    /// `POST /auth/passkey/ticket` with an account token: the one-time URL of the page that adds a passkey.
    package func passkeyTicket(_ accessToken: Secret) async throws(BrokerAPIError) -> (url: String, expiresIn: Int64) {
        let answer = try await postAuthorized("/auth/passkey/ticket", body: [:], accessToken)
        guard let url = answer["url"]?.stringValue, url.hasPrefix(baseURL + "/") else {
            throw .badResponse("the broker's passkey ticket has no URL of its own")
        }
        return (url, answer["expires_in"]?.intValue ?? 600)
    }

    /// `GET /auth/passkeys` with an account token: `{"passkeys": [{id, name, created_at, last_used_at, …}]}`.
    package func passkeys(_ accessToken: Secret) async throws(BrokerAPIError) -> JSONValue {
        let request = HTTPClientRequest(
            url: baseURL + "/auth/passkeys",
            headers: Self.accept + [(name: "Authorization", value: "Bearer " + accessToken.exposed)])
        return try await send(request, expect: 200)
    }

    /// `GET /auth/mfa` with an account token: `{"totp", "totp_added_at", "recovery_codes_left", "required"}`.
    package func secondFactorStatus(_ accountToken: Secret) async throws(BrokerAPIError) -> JSONValue {
        let request = HTTPClientRequest(
            url: baseURL + "/auth/mfa",
            headers: Self.accept + [(name: "Authorization", value: "Bearer " + accountToken.exposed)])
        return try await send(request, expect: 200)
    }

    /// `POST /auth/mfa/totp`, with an account token or else the email and password: a key to enrol
    /// (`{"otpauth_uri", "key", "enrolment", "expires_in"}`).
    package func beginTOTP(accountToken: Secret?, email: String?, password: Secret?) async throws(BrokerAPIError)
        -> JSONValue
    {
        if let accountToken { return try await postAuthorized("/auth/mfa/totp", body: [:], accountToken) }
        let body: JSONValue = ["email": .string(email ?? ""), "password": .string(password?.exposed ?? "")]
        return try await postJSON("/auth/mfa/totp", body: body, expect: 200, timeout: Self.passwordTimeout)
    }

    /// `POST /auth/mfa/totp/confirm {enrolment, code}`: `{"recovery_codes": […]}`.
    package func confirmTOTP(enrolment: String, code: Secret) async throws(BrokerAPIError) -> JSONValue {
        try await postJSON(
            "/auth/mfa/totp/confirm", body: ["enrolment": .string(enrolment), "code": .string(code.exposed)],
            expect: 201)
    }

    /// `POST /auth/mfa/totp/remove {password, code}` with an account token.
    package func removeTOTP(_ accountToken: Secret, password: Secret, code: Secret) async throws(BrokerAPIError)
        -> JSONValue
    {
        try await postAuthorized(
            "/auth/mfa/totp/remove", body: ["password": .string(password.exposed), "code": .string(code.exposed)],
            accountToken)
    }

    /// `POST /auth/mfa/recovery-codes {code}` with an account token: `{"recovery_codes": […]}`.
    package func newRecoveryCodes(_ accountToken: Secret, code: Secret) async throws(BrokerAPIError) -> JSONValue {
        try await postAuthorized("/auth/mfa/recovery-codes", body: ["code": .string(code.exposed)], accountToken)
    }

    /// `POST /auth/passkeys/remove {id}` with an account token.
    package func removePasskey(_ accessToken: Secret, id: String) async throws(BrokerAPIError) -> JSONValue {
        try await postAuthorized("/auth/passkeys/remove", body: ["id": .string(id)], accessToken)
    }

    /// `GET /auth/account/export` with the session's token.
    package func exportAccount(_ accessToken: Secret) async throws(BrokerAPIError) -> JSONValue {
        let request = HTTPClientRequest(
            url: baseURL + "/auth/account/export",
            headers: Self.accept + [(name: "Authorization", value: "Bearer " + accessToken.exposed)])
        return try await send(request, expect: 200)
    }

    /// `POST /auth/password/forgot`: the broker mails a reset link if the address has an account (202 either way).
    package func forgotPassword(email: String) async throws(BrokerAPIError) -> JSONValue {
        try await postJSON("/auth/password/forgot", body: ["email": .string(email)], expect: 202)
    }

    /// `POST /auth/mfa/recover {"email"}`: a link that removes a lost second factor (after the password), mailed
    /// to the account's confirmed address; 202 whatever the address.
    package func recoverSecondFactor(email: String) async throws(BrokerAPIError) -> JSONValue {
        try await postJSON("/auth/mfa/recover", body: ["email": .string(email)], expect: 202)
    }

    /// `POST /auth/password/change` with the session's access token; the broker ends the other sessions.
    package func changePassword(_ accessToken: Secret, current: Secret, new: Secret) async throws(BrokerAPIError)
        -> JSONValue
    {
        let body: JSONValue = ["current_password": .string(current.exposed), "new_password": .string(new.exposed)]
        return try await postAuthorized("/auth/password/change", body: body, accessToken)
    }

    /// A CI token from `POST /auth/token`: `client_credentials` when `subjectToken` is `nil` (the secret sent
    /// with HTTP Basic, RFC 6749 §2.3.1), else an RFC 8693 token exchange of `subjectToken`.
    package func mint(
        clientID: String,
        secret: Secret?,
        subjectToken: Secret?,
        audience: String?,
        scope: String?,
        ttl: Int64?
    ) async throws(BrokerAPIError) -> MintedToken {
        var fields: [(String, String)]
        if let subjectToken {
            fields = [
                ("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"),
                ("subject_token", subjectToken.exposed),
                ("subject_token_type", "urn:ietf:params:oauth:token-type:jwt"),
                ("requested_token_type", "urn:ietf:params:oauth:token-type:access_token"),
            ]
        } else {
            fields = [("grant_type", "client_credentials")]
        }
        var headers: [(name: String, value: String)] = []
        if let secret {
            headers.append(HTTPBasic.header(id: clientID, secret: secret))
        } else {
            fields.append(("client_id", clientID))
        }
        if let audience { fields.append(("audience", audience)) }
        if let scope { fields.append(("scope", scope)) }
        if let ttl { fields.append(("ttl", String(ttl))) }
        let document = try await send(
            HTTPClientRequest.form(url: baseURL + "/auth/token", fields: fields, headers: headers), expect: 200)
        do {
            return MintedToken(response: try TokenResponse(json: document))
        } catch {
            throw .badResponse(error.description)
        }
    }

    static let accept: [(name: String, value: String)] = [(name: "Accept", value: "application/json")]

    /// Register and login wait on a deliberately slow password hash at the broker, which answers 429 itself
    /// when its hashing queue is full; on a busy broker the answer may take longer than other requests.
    static let passwordTimeout: Duration = .seconds(120)

    private func postJSON(_ path: String, body: JSONValue, expect: Int, timeout: Duration? = nil)
        async throws(BrokerAPIError) -> JSONValue
    {
        try await postJSON(path, body: body, accepting: [expect], timeout: timeout)
    }

    private func postJSON(_ path: String, body: JSONValue, accepting: Set<Int>, timeout: Duration? = nil)
        async throws(BrokerAPIError) -> JSONValue
    {
        var api = self
        if let timeout { api.timeout = max(api.timeout, timeout) }
        return try await api.postJSONNow(path, body: body, accepting: accepting)
    }

    private func postJSONNow(_ path: String, body: JSONValue, accepting: Set<Int>) async throws(BrokerAPIError)
        -> JSONValue
    {
        let request = HTTPClientRequest(
            method: "POST",
            url: baseURL + path,
            headers: Self.accept + [(name: "Content-Type", value: "application/json")],
            body: body.serializedBytes
        )
        return try await send(request, accepting: accepting)
    }

    private func send(_ request: HTTPClientRequest, expect: Int, presenting token: Secret? = nil)
        async throws(BrokerAPIError) -> JSONValue
    {
        try await send(request, accepting: [expect], presenting: token)
    }

    /// Sends `request`, with a DPoP proof when it goes to one of ``proofPaths`` and the profile has a key;
    /// when the broker asks for its nonce (`use_dpop_nonce`), once more with it.
    private func send(_ request: HTTPClientRequest, accepting: Set<Int>, presenting token: Secret? = nil)
        async throws(BrokerAPIError) -> JSONValue
    {
        let issuing =
            request.url.hasPrefix(baseURL) && Self.proofPaths.contains(String(request.url.dropFirst(baseURL.count)))
        guard let proofKey, token.map(isDPoPBound) ?? issuing else {
            switch try await exchange(request, accepting: accepting) {
            case .document(let document): return document
            case .nonceRequired: throw .rejected(status: 400, code: .useDPoPNonce, description: "")
            }
        }
        var nonce: String?
        for _ in 0..<2 {
            var proved = request
            do {
                proved.headers.append(
                    (
                        name: "DPoP",
                        value: try DPoPProof.make(
                            key: proofKey, method: request.method, url: request.url, accessToken: token?.exposed,
                            nonce: nonce, now: clock.seconds())
                    ))
            } catch {
                throw .badResponse("cannot make a DPoP proof: \(error)")
            }
            switch try await exchange(proved, accepting: accepting) {
            case .document(let document): return document
            case .nonceRequired(let given): nonce = given
            }
        }
        throw .rejected(status: 400, code: .useDPoPNonce, description: "the broker keeps refusing its own nonce")
    }

    /// What one exchange gave: the answer, or the broker's request for a DPoP nonce (`DPoP-Nonce`).
    private enum Exchange {
        case document(JSONValue)
        case nonceRequired(String)
    }

    private func exchange(_ request: HTTPClientRequest, accepting: Set<Int>) async throws(BrokerAPIError) -> Exchange {
        var request = request
        request.timeout = timeout
        request.connectTimeout = min(timeout, .seconds(10))
        request.maxResponseBytes = 1024 * 1024
        let response: HTTPClientResponse
        do {
            response = try await (client ?? HTTPClient.shared as any HTTPTransport).send(request)
        } catch let error as HTTPClientError {
            guard error.kind == .timeout else { throw .unreachable(error.message) }
            throw .unreachable(
                "\(error.message) (the wait for an answer was \(timeout.components.seconds) s; http_timeout in the "
                    + "client's config.json or BROKER_HTTP_TIMEOUT sets it)")
        } catch {
            throw .unreachable("\(error)")
        }
        let document = JSONValue.parse(response.body)
        guard accepting.contains(response.status) else {
            if document?["error"]?.stringValue == OAuthErrorCode.useDPoPNonce.rawValue,
                let nonce = response.header("DPoP-Nonce")
            {
                return .nonceRequired(nonce)
            }
            if let error = ErrorResponse(json: document) {
                throw .rejected(status: response.status, code: error.code, description: error.description)
            }
            throw .badResponse("HTTP \(response.status) from \(request.url)")
        }
        guard let document else { throw .badResponse("\(request.url) answered with something that is not JSON") }
        return .document(document)
    }

    /// The session answer, read by the type the server writes it with.
    static func session(from document: JSONValue) throws(BrokerAPIError) -> SessionResponse {
        let response: TokenResponse
        do {
            response = try TokenResponse(json: document)
        } catch {
            throw .badResponse(error.description)
        }
        return SessionResponse(
            userID: response.userID,
            provider: response.provider,
            accessToken: Secret(response.accessToken),
            expiresIn: response.expiresIn,
            refreshToken: response.refreshToken.map(Secret.init)
        )
    }
}

/// What `POST /auth/device` answered.
package struct DeviceStart: Sendable {
    package var deviceCode: Secret
    package var userCode: String
    package var verificationURI: String
    package var verificationURIComplete: String?
    package var expiresIn: Int64
    package var interval: Int64
}

extension ClientSettings {
    /// The broker API of these settings: their broker, and their wait for each answer.
    package var api: BrokerAPI { api(for: key) }

    /// The broker API for `key`'s broker (`logout --all` visits every cached session's broker) with these settings'
    /// wait for each answer.
    package func api(for key: SessionKey) -> BrokerAPI {
        var api = BrokerAPI(baseURL: key.brokerURL)
        api.timeout = requestTimeout
        // The profile's key, made at its first use: what the broker issues to this profile is bound to it. A
        // key file that cannot be read leaves the key out (a bound session then says, at its refresh, that it
        // needs the key: sign in again).
        if dpop {
            let keys = dpopKeys
            api.proofKeySource = ProofKeySource { try? keys.loadOrCreate(key) }
        }
        return api
    }

    /// The settings' DPoP key store.
    package var dpopKeys: DPoPKeyStore { dpopKeys(interactive: keyringMayPrompt) }

    /// The settings' DPoP key store, with the keyring unless `credential_store` is `file`.
    package func dpopKeys(interactive: Bool) -> DPoPKeyStore {
        DPoPKeyStore(
            home: home, vault: credentialStore == .file ? nil : vault(interactive: interactive),
            strict: credentialStore == .keyring)
    }
}
