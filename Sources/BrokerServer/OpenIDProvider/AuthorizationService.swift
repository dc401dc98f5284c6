import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging

/// `/auth/authorize` and the pages behind it (OpenID Connect Core 3.1.2, issue "Sign in to any app"): the
/// request is checked, the person signs in (or already is: the broker's own browser session), allows the app
/// (or did before, or it is first-party), and the app gets a one-time code at its redirect URI. The broker CLI
/// is one of its clients (``CLIClient``), built in.
///
/// Errors go to the redirect URI only once the client and the redirect URI are known to be good; before that
/// the person gets a page and nobody is redirected anywhere (never an open redirect).
final class AuthorizationService: ContextualService {
    let context: ServiceContext
    let accounts: AccountService
    let signIn: SignInService
    let sessions: BrowserSessions
    let flowKey: [UInt8]
    let backchannel: BackchannelLogout
    let passkeys: PasskeyService
    let codes: AuthorizationCodes
    /// Pushed requests each app may store (RT3-8): a public app authenticates with nothing, so its client id
    /// alone would let anyone fill the store; counted per app and per source address, in the store.
    let pushesPerApp: SharedRateLimiter
    let pushesPerAddress: SharedRateLimiter
    /// `request` and `request_uri` (Core 6).
    let requestObjects: RequestObjects

    init(
        context: ServiceContext, accounts: AccountService, signIn: SignInService, flowKey: [UInt8],
        backchannel: BackchannelLogout,
        passkeys: PasskeyService, requestObjects: RequestObjects
    ) {
        self.requestObjects = requestObjects
        self.context = context
        self.backchannel = backchannel
        self.passkeys = passkeys
        self.accounts = accounts
        self.signIn = signIn
        self.flowKey = flowKey
        sessions = BrowserSessions(store: context.store, tokens: context.tokens)
        codes = AuthorizationCodes(context: context)
        pushesPerApp = SharedRateLimiter(
            "par_app", capacity: 600, per: 60, store: context.store, clock: context.tokens.clock)
        pushesPerAddress = SharedRateLimiter(
            "par_address", capacity: 60, per: 60, store: context.store, clock: context.tokens.clock)
    }

    // MARK: The request

    /// A request that cannot go back to the app: the page says why, and nothing is redirected.
    private func badRequestPage(_ text: String) -> APIResponse {
        Page.response(status: 400, Page.message(title: "This sign-in request is not valid", text: text))
    }

    /// An error for the app, at its redirect URI (Core 3.1.2.6), carrying `state` and `iss`.
    private func errorRedirect(
        _ request: AuthorizationRequest, _ error: OAuthErrorCode, _ description: String, page: Bool
    ) -> APIResponse {
        request.answer([("error", error.rawValue), ("error_description", description)], issuer: issuer, fromForm: page)
    }

    /// What checking an authorization request's parameters found: the request, or the error for the app.
    enum Checked {
        case request(AuthorizationRequest)
        /// An OAuth error code and its description (for the redirect URI, or `/auth/par`'s JSON answer).
        case refused(AuthorizationRequest, OAuthErrorCode, String)
    }

    /// Checks an authorization request's parameters for `app` once its `redirect_uri` is known to be one it
    /// registered: the same checks at `/auth/authorize` and at `/auth/par` (RFC 9126 §2.1).
    func check(_ parameters: [String: String], app: AppRecord, redirectURI: String) async throws -> Checked {
        var request = AuthorizationRequest(
            clientID: app.clientID, redirectURI: redirectURI, scopes: [], state: parameters["state"],
            nonce: parameters["nonce"], codeChallenge: nil, prompt: [], maxAge: nil, loginHint: nil,
            expectedSubject: nil, expiresAt: now + AuthorizationRequest.lifetime)
        func refuse(_ error: OAuthErrorCode, _ description: String) -> Checked {
            .refused(request, error, description)
        }
        // The mode first: every answer from here on, an error included, goes back in it.
        switch parameters["response_mode"] {
        case nil, "query"?: break
        case "form_post"? where app.clientID != CLIClient.clientID && AppRules.origin(redirectURI) != nil:
            request.formPost = true
        case "form_post"?:
            return refuse(.invalidRequest, "response_mode=form_post needs an http(s) redirect URI of an app")
        default:
            return refuse(.invalidRequest, "response_mode must be query or form_post")
        }
        if let state = request.state, state.utf8.count > 1024 { return refuse(.invalidRequest, "state is too long") }
        if app.clientID == CLIClient.clientID {
            // The CLI checks `state` and always sends one, with an explicit S256 (the contract's loopback flow).
            guard let state = request.state, !state.isEmpty, state.utf8.count <= CLIClient.maxState else {
                return refuse(.invalidRequest, "state is required (at most 512 characters)")
            }
            guard parameters["code_challenge_method"] == "S256" else {
                return refuse(.invalidRequest, "code_challenge_method must be S256")
            }
        }
        if let nonce = request.nonce, nonce.utf8.count > 1024 { return refuse(.invalidRequest, "nonce is too long") }
        // Request objects, by value or by reference (Core 6): not supported, and discovery says so. A request_uri
        // of broker's own /auth/par never gets here (it is replaced by the pushed parameters).
        if parameters["request"] != nil { return refuse(.requestNotSupported, "request objects are not supported") }
        if parameters["request_uri"] != nil {
            return refuse(.requestURINotSupported, "request_uri is only taken from broker's own /auth/par")
        }
        guard let responseType = parameters["response_type"] else {
            return refuse(.invalidRequest, "response_type is required")
        }
        guard responseType == "code" else {
            return refuse(.unsupportedResponseType, "only response_type=code is supported")
        }
        // RFC 8707: a registered resource, whose entry may allow scopes beyond the app's own.
        var resource: ResourceRecord?
        do {
            resource = try await ResourceIndicators.named(parameters["resource"], store: store)
        } catch let error as APIError where error.code == ResourceIndicators.invalidTarget {
            return refuse(error.code, error.detail)
        }
        request.resource = resource?.url
        request.scopes = AppRules.scopes(parameters["scope"] ?? "", app: app, resource: resource)
        if let text = parameters["claims"] {
            do {
                request.claims = try ClaimsRequest.parse(text)
            } catch {
                return refuse(.invalidRequest, error.description)
            }
        }
        if let text = parameters["acr_values"] {
            let values = text.split(separator: " ").map(String.init)
            guard values.count <= 8, values.allSatisfy({ $0.utf8.count <= 64 }) else {
                return refuse(.invalidRequest, "acr_values has at most 8 values of at most 64 bytes")
            }
            request.acrValues = values
        }
        if let method = parameters["code_challenge_method"], method != "S256" {
            return refuse(.invalidRequest, "code_challenge_method must be S256")
        }
        if let challenge = parameters["code_challenge"] {
            guard PKCE.isValidS256Challenge(challenge) else {
                return refuse(.invalidRequest, "code_challenge must be an S256 challenge (43 base64url characters)")
            }
            request.codeChallenge = challenge
        } else if app.isPublic {
            return refuse(.invalidRequest, "a public app must use PKCE (code_challenge with S256)")
        }
        let prompt = Set((parameters["prompt"] ?? "").split(separator: " ").map(String.init))
        guard prompt.isSubset(of: ["none", "login", "consent", "select_account"]) else {
            return refuse(.invalidRequest, "prompt has an unknown value")
        }
        if prompt.contains("none") && prompt.count > 1 {
            return refuse(.invalidRequest, "prompt=none cannot be combined with other values")
        }
        request.prompt = prompt
        if let text = parameters["max_age"] {
            guard let maxAge = Int64(text), maxAge >= 0 else {
                return refuse(.invalidRequest, "max_age must be a number of seconds")
            }
            request.maxAge = maxAge
        }
        if let hint = parameters["login_hint"], hint.utf8.count <= 254 { request.loginHint = hint }
        if let hint = parameters["id_token_hint"] {
            guard let subject = tokens.idTokenHintSubject(hint, clientID: app.clientID) else {
                return refuse(.invalidRequest, "id_token_hint is not an id token this broker issued to this app")
            }
            request.expectedSubject = subject
        }
        // A `sub` asked for with a value (Core 5.5.1): only that user's sign-in answers, as with id_token_hint.
        if let wanted = request.claims?.idToken["sub"]?.values {
            guard wanted.count == 1, request.expectedSubject == nil || request.expectedSubject == wanted[0] else {
                return refuse(.invalidRequest, "claims.id_token.sub names another user than id_token_hint, or several")
            }
            request.expectedSubject = wanted[0]
        }
        return .request(request)
    }

    /// `GET|POST /auth/authorize`: `parameters` are the query (GET) or the form (POST); unknown ones are
    /// ignored, as Core 3.1.2.1 asks. With a `request_uri` from `/auth/par`, the pushed parameters are the
    /// request (taken once: a second use, or one after 60 s, gets a page).
    func authorize(_ query: [String: String], cookie: String?, address: String?) async throws -> APIResponse {
        guard let clientID = query["client_id"], !clientID.isEmpty else {
            return badRequestPage("The app did not say who it is (client_id is missing).")
        }
        guard let app = try await client(clientID: clientID) else {
            return badRequestPage("No app called \(clientID.prefix(64)) is registered with this broker.")
        }
        var parameters = query
        if let requestURI = query["request_uri"], requestURI.hasPrefix(Self.requestURIPrefix) {
            guard let pushed = try await takePushed(requestURI, app: app) else {
                metrics.appAuthorization(outcome: "invalid_request_uri")
                return badRequestPage(
                    "This sign-in request has expired or was already used (request_uri). Go back to "
                        + "\(app.clientID) and start again.")
            }
            parameters = pushed
        } else if app.requirePAR || tokens.configuration.requirePAR {
            metrics.appAuthorization(outcome: "par_required")
            return badRequestPage(
                "\(app.clientID) must push its sign-in requests to the broker first (RFC 9126: request_uri from "
                    + "/auth/par).")
        }
        // A request object (Core 6), by value or by reference: its parameters, the redirect URI among them, replace
        // the query's. The CLI sends none (its check refuses one).
        if app.clientID != CLIClient.clientID, parameters["request"] != nil || parameters["request_uri"] != nil {
            do throws(RequestObjects.Refusal) {
                parameters = try await requestObjects.resolve(parameters, app: app)
            } catch {
                metrics.appAuthorization(outcome: error.code.rawValue)
                guard let redirectURI = query["redirect_uri"], CLIClient.redirectAllowed(redirectURI, for: app) else {
                    return badRequestPage("The app's request object is not usable: \(error.description.prefix(300))")
                }
                let request = AuthorizationRequest(
                    clientID: app.clientID, redirectURI: redirectURI, scopes: [], state: query["state"], nonce: nil,
                    codeChallenge: nil, prompt: [], maxAge: nil, loginHint: nil, expectedSubject: nil,
                    expiresAt: now + AuthorizationRequest.lifetime)
                return errorRedirect(request, error.code, error.description, page: false)
            }
        }
        guard let redirectURI = parameters["redirect_uri"], CLIClient.redirectAllowed(redirectURI, for: app) else {
            return badRequestPage(
                "The address \(app.clientID) asked to return to is not one it registered (redirect_uri).")
        }
        // From here on, errors go back to the app.
        let request: AuthorizationRequest
        switch try await check(parameters, app: app, redirectURI: redirectURI) {
        case .refused(let refused, let error, let description):
            metrics.appAuthorization(outcome: error.rawValue)
            return errorRedirect(refused, error, description, page: false)
        case .request(let checked):
            request = checked
        }
        func refuse(_ error: OAuthErrorCode, _ description: String) -> APIResponse {
            metrics.appAuthorization(outcome: error.rawValue)
            return errorRedirect(request, error, description, page: false)
        }
        let prompt = request.prompt

        let session = try await sessions.current(cookie: cookie)
        if let session, !needsSignIn(request, app: app, session: session) {
            return try await afterSignIn(request, app: app, session: session, fromForm: false, setCookie: nil)
        }
        if prompt.contains("none") {
            if let session, !needsSignIn(request, app: app, session: session, minding: false) {
                // Signed in as asked, but not strongly enough: only a new sign-in with more could answer.
                return refuse(.interactionRequired, "a stronger sign-in than this one is required (acr)")
            }
            return refuse(.loginRequired, "no sign-in at the broker (or not the one asked for)")
        }
        let stronger =
            strongEnough(request, app: app, acr: "1")
            ? nil : "\(app.clientID) asks for two factors: a passkey, or a password and a code from your app."
        return try signInPage(request, app: app, problem: stronger)
    }

    /// Whether a sign-in at `acr` is what the request insists on (an essential `acr`) and what the app requires
    /// (`--require-mfa`: two factors).
    private func strongEnough(_ request: AuthorizationRequest, app: AppRecord, acr: String) -> Bool {
        AuthenticationContext.meets(request.claims, acr: acr)
            && (!app.requireMFA || acr == AuthenticationContext.twoFactors)
    }

    /// Whether the browser session does not do for this request: `prompt=login` or `select_account`, older
    /// than `max_age`, not the user an `id_token_hint` names, or (`minding` the level) weaker than an essential
    /// `acr` asks.
    private func needsSignIn(
        _ request: AuthorizationRequest, app: AppRecord, session: BrowserSessionRecord, minding level: Bool = true
    ) -> Bool {
        if level && !strongEnough(request, app: app, acr: AuthenticationContext.acr(session.signedInWith)) {
            return true
        }
        if request.prompt.contains("login") || request.prompt.contains("select_account") { return true }
        // max_age=0 asks for a sign-in now, like prompt=login (Core 3.1.2.1).
        if let maxAge = request.maxAge, maxAge == 0 || now - session.authTime > maxAge { return true }
        if let expected = request.expectedSubject, expected != tokens.subject(of: session.userID, for: app) {
            return true
        }
        return false
    }

    // MARK: Signing in

    /// The sign-in page of the account page (``AccountPageClient``): `fresh` asks for a new sign-in whatever the
    /// browser session (before a change to how the account is reached), `twoFactors` insists on both (an essential
    /// `acr` of 2: a sign-in with one is refused, back on the account page). `said` is shown there after.
    func accountSignIn(
        problem: String?, fresh: Bool = false, twoFactors: Bool = false, said: AccountPageClient.Said? = nil,
        status: Int = 200
    ) throws -> APIResponse {
        var request = AuthorizationRequest(
            clientID: AccountPageClient.clientID, redirectURI: AccountPageClient.redirectURI(issuer: issuer),
            scopes: ["openid"], state: said?.rawValue, nonce: nil, codeChallenge: nil, prompt: fresh ? ["login"] : [],
            maxAge: nil, loginHint: nil, expectedSubject: nil, expiresAt: now + AuthorizationRequest.lifetime)
        if twoFactors {
            request.claims = ClaimsRequest(
                idToken: ["acr": ClaimsRequest.Claim(essential: true, values: [AuthenticationContext.twoFactors])])
        }
        return try signInPage(request, app: AccountPageClient.record(issuer: issuer), problem: problem, status: status)
    }

    private func signInPage(
        _ request: AuthorizationRequest, app: AppRecord, problem: String?, email: String? = nil, status: Int = 200
    ) throws -> APIResponse {
        let sealed = try request.seal(key: flowKey)
        let providers = tokens.configuration.enabledProviders.filter {
            $0 != .custom && signIn.identityProviders[$0] != nil
        }
        .map { ($0.rawValue, signIn.displayName($0)) }
        let passkeys = passkeys.enabled
        var response = try FormGuard.page(secure: secure) { csrf in
            Page.appSignIn(
                app: AccountPageClient.shown(app), request: sealed, csrf: csrf, providers: providers,
                password: tokens.configuration.customEnabled, email: email ?? request.loginHint, problem: problem,
                canReset: accounts.verification.mailer != nil, passkeys: passkeys,
                icons: Dictionary(uniqueKeysWithValues: signIn.icons.map { ($0.key.rawValue, $0.value) }))
        }
        response.status = status
        return passkeys ? Page.withPasskeys(response) : response
    }

    /// `POST /auth/authorize/passkey {request, csrf, ceremony, credential}`: a discoverable passkey sign-in;
    /// refused, the sign-in page again with the reason.
    func passkey(_ input: RequestInput, cookie: String?) async throws -> APIResponse {
        let (request, app): (AuthorizationRequest, AppRecord)
        switch try await formRequest(input, cookie: cookie) {
        case .failure(let page): return page
        case .success(let pair): (request, app) = pair
        }
        let user: UserRecord
        do {
            (user, _) = try await passkeys.signIn(
                ceremony: (try? input.string("ceremony")) ?? "", credential: (try? input.string("credential")) ?? "")
        } catch let failure as PasskeyService.Failure {
            return try signInPage(request, app: app, problem: failure.message, status: 400)
        }
        let (session, setCookie) = try await sessions.start(user: user.id, signedInWith: .passkey)
        return try await afterSignIn(request, app: app, session: session, fromForm: true, setCookie: setCookie)
    }

    /// What a form of these pages brought: its request and app, or the page saying why it is no good.
    private enum FormOutcome {
        case success((AuthorizationRequest, AppRecord))
        case failure(APIResponse)
    }

    /// The sealed request of a form, or why it is no good (a page).
    private func formRequest(_ input: RequestInput, cookie: String?) async throws -> FormOutcome {
        guard FormGuard.accepts(cookie: cookie, field: (try? input.string("csrf")) ?? "") else {
            return .failure(Page.response(status: 403, Page.staleAppForm))
        }
        guard let request = AuthorizationRequest.open((try? input.string("request")) ?? "", key: flowKey, now: now),
            let app = try await client(clientID: request.clientID),
            CLIClient.redirectAllowed(request.redirectURI, for: app)
        else {
            return .failure(Page.response(status: 400, Page.staleAppForm))
        }
        return .success((request, app))
    }

    /// `POST /auth/authorize/password {request, csrf, email, password}`: the login throttle applies as at
    /// `/auth/login`; a wrong pair shows the form again.
    func password(_ input: RequestInput, cookie: String?, address: String?) async throws -> APIResponse {
        let (request, app): (AuthorizationRequest, AppRecord)
        switch try await formRequest(input, cookie: cookie) {
        case .failure(let page): return page
        case .success(let pair): (request, app) = pair
        }
        guard tokens.configuration.customEnabled else { return try signInPage(request, app: app, problem: nil) }
        let email = (try? input.string("email")) ?? ""
        let account: PasswordAccount
        do {
            account = try await accounts.authenticate(
                email: email, password: Secret((try? input.string("password")) ?? ""), address: address)
        } catch let error as APIError where error.status < 500 {
            metrics.signIn(provider: "custom", outcome: error.code.rawValue)
            audit.record("sign_in", outcome: "failure", fields: ["provider": "custom", "reason": error.code.rawValue])
            return try signInPage(
                request, app: app,
                problem: error.code == .invalidCredentials ? "Wrong email or password." : error.detail,
                email: String(email.prefix(254)), status: error.status)
        }
        if try await accounts.secondFactors.factor(of: account.user.id) != nil {
            return try await secondFactorPage(request, app: app, user: account.user.id, problem: nil)
        }
        if configuration.requireMFA || app.requireMFA {
            audit.record(
                "sign_in", outcome: "failure", user: account.user.id,
                fields: ["provider": "custom", "reason": "mfa_enrollment_required", "flow": "app"])
            return try signInPage(
                request, app: app,
                problem: "\(configuration.requireMFA ? "This broker" : app.clientID) asks for a second factor, and "
                    + "this account has none yet. Add one (broker mfa totp add --email \(account.email)), or sign in "
                    + "with a passkey.",
                email: account.email, status: 403)
        }
        return try await passwordSignedIn(request, app: app, user: account.user.id, way: .custom)
    }

    /// The password (and its code, when `way` says so) was right: the browser session, then on into the app.
    private func passwordSignedIn(_ request: AuthorizationRequest, app: AppRecord, user: UserID, way: ProviderID)
        async throws -> APIResponse
    {
        metrics.signIn(provider: "custom", outcome: "success")
        audit.record("sign_in", user: user, fields: ["provider": "custom", "flow": "app", "method": way.rawValue])
        let (session, setCookie) = try await sessions.start(user: user, signedInWith: way)
        return try await afterSignIn(request, app: app, session: session, fromForm: true, setCookie: setCookie)
    }

    /// The code page of a sign-in whose password was right; an account with a passkey may use it instead of the
    /// code (the passkey is the second factor then).
    private func secondFactorPage(
        _ request: AuthorizationRequest, app: AppRecord, user: UserID, problem: String?, status: Int = 200
    ) async throws -> APIResponse {
        let sealed = try request.seal(key: flowKey)
        let ticket = try accounts.secondFactors.ticket(for: user)
        let withPasskey = passkeys.enabled ? try await !store.passkeys(user: user).isEmpty : false
        var response = try FormGuard.page(secure: secure) { csrf in
            Page.secondFactor(
                action: "/auth/authorize/mfa", fields: [("request", sealed)], ticket: ticket, csrf: csrf,
                continuing: AccountPageClient.shown(app), problem: problem,
                mailRecovery: accounts.secondFactors.mailer != nil,
                passkey: withPasskey
                    ? Page.passkeySignIn(
                        action: "/auth/authorize/mfa-passkey",
                        hidden: [("request", sealed), ("ticket", ticket), ("csrf", csrf)],
                        label: "Use a passkey instead") : nil)
        }
        response.status = status
        return withPasskey ? Page.withPasskeys(response) : response
    }

    /// `POST /auth/authorize/mfa-passkey {request, csrf, ticket, ceremony, credential}`: a passkey of the same
    /// account as the second step after the password (a passkey of another account signs nobody in here).
    func secondFactorPasskey(_ input: RequestInput, cookie: String?) async throws -> APIResponse {
        let (request, app): (AuthorizationRequest, AppRecord)
        switch try await formRequest(input, cookie: cookie) {
        case .failure(let page): return page
        case .success(let pair): (request, app) = pair
        }
        guard let user = accounts.secondFactors.user(ofTicket: (try? input.string("ticket")) ?? "") else {
            return try signInPage(request, app: app, problem: "The sign-in took too long; sign in again.", status: 400)
        }
        let owner: UserRecord
        do {
            (owner, _) = try await passkeys.signIn(
                ceremony: (try? input.string("ceremony")) ?? "", credential: (try? input.string("credential")) ?? "")
        } catch let failure as PasskeyService.Failure {
            return try await secondFactorPage(request, app: app, user: user, problem: failure.message, status: 400)
        }
        guard owner.id == user else {
            audit.record(
                "sign_in", outcome: "failure", user: user,
                fields: ["provider": "custom", "reason": "passkey_of_another_account", "flow": "app"])
            return try await secondFactorPage(
                request, app: app, user: user,
                problem: "That passkey belongs to another account. Use a passkey of this one, or the code.", status: 401
            )
        }
        // The passkey is two factors by itself (possession and a verified user); the session is the passkey's.
        audit.record(
            "sign_in", user: user, fields: ["provider": "custom", "flow": "app", "method": "password+passkey"])
        metrics.signIn(provider: "custom", outcome: "success")
        let (session, setCookie) = try await sessions.start(user: user, signedInWith: .passkey)
        return try await afterSignIn(request, app: app, session: session, fromForm: true, setCookie: setCookie)
    }

    /// `POST /auth/authorize/mfa {request, csrf, ticket, otp}`: the code after the password. A wrong code shows
    /// the page again (the ticket lives five minutes; every guess counts in the login throttle).
    func secondFactor(_ input: RequestInput, cookie: String?, address: String?) async throws -> APIResponse {
        let (request, app): (AuthorizationRequest, AppRecord)
        switch try await formRequest(input, cookie: cookie) {
        case .failure(let page): return page
        case .success(let pair): (request, app) = pair
        }
        guard let user = accounts.secondFactors.user(ofTicket: (try? input.string("ticket")) ?? "") else {
            return try signInPage(request, app: app, problem: "The sign-in took too long; sign in again.", status: 400)
        }
        let method: SecondFactorService.Method?
        do {
            method = try await accounts.secondFactors.check(
                (try? input.string("otp")) ?? "", user: user, address: address)
        } catch let error as APIError where error.status < 500 {
            return try await secondFactorPage(
                request, app: app, user: user, problem: error.detail, status: error.status)
        }
        guard method != nil else {
            metrics.signIn(provider: "custom", outcome: "wrong_code")
            audit.record(
                "sign_in", outcome: "failure", user: user,
                fields: ["provider": "custom", "reason": "wrong_code", "flow": "app"])
            return try await secondFactorPage(
                request, app: app, user: user,
                problem: "Wrong or already used code. Type the code the app shows now, or a recovery code.", status: 401
            )
        }
        return try await passwordSignedIn(request, app: app, user: user, way: .customOTP)
    }

    /// `GET /auth/authorize/register?request=…`: a new email + password account, from the sign-in page.
    func registerPage(query: [String: String]) async throws -> APIResponse {
        guard tokens.configuration.customEnabled,
            let request = AuthorizationRequest.open(query["request"] ?? "", key: flowKey, now: now),
            let app = try await client(clientID: request.clientID)
        else { return Page.response(status: 400, Page.staleAppForm) }
        return try registerForm(request, app: app, problem: nil, email: request.loginHint)
    }

    private func registerForm(
        _ request: AuthorizationRequest, app: AppRecord, problem: String?, email: String?, status: Int = 200
    ) throws -> APIResponse {
        let sealed = try request.seal(key: flowKey)
        var response = try FormGuard.page(secure: secure) { csrf in
            Page.appRegister(
                app: AccountPageClient.shown(app), request: sealed, csrf: csrf, email: email, problem: problem)
        }
        response.status = status
        return response
    }

    /// `POST /auth/authorize/register {request, csrf, email, password, name}`: registration as at
    /// `/auth/register` (its rules, limits, verification and enumeration protection), then on into the app —
    /// unless the address must be confirmed first.
    func register(_ input: RequestInput, cookie: String?, address: String?) async throws -> APIResponse {
        let (request, app): (AuthorizationRequest, AppRecord)
        switch try await formRequest(input, cookie: cookie) {
        case .failure(let page): return page
        case .success(let pair): (request, app) = pair
        }
        guard tokens.configuration.customEnabled else { return try signInPage(request, app: app, problem: nil) }
        let email = String(((try? input.string("email")) ?? "").prefix(254))
        let answer: APIResponse
        do {
            answer = try await accounts.register(input, address: address, startSession: false)
        } catch let error as APIError where error.status < 500 {
            let problem =
                error.code == .accountExists
                ? "An account uses this address already: sign in, or reset its password." : error.detail
            return try registerForm(request, app: app, problem: problem, email: email, status: error.status)
        }
        guard answer.status == 201, let user = answer.body["user_id"]?.stringValue.flatMap(UserID.init),
            !accounts.verification.required
        else {
            // Concealed (enumeration protection) or to be confirmed first: the mail says what to do.
            return Page.response(
                status: 200,
                Page.message(
                    title: "Check your mail",
                    text: "Follow the link we sent to \(email) to confirm the address, then sign in to "
                        + "\(AccountPageClient.shown(app))."
                ))
        }
        let (session, setCookie) = try await sessions.start(user: user, signedInWith: .custom)
        return try await afterSignIn(request, app: app, session: session, fromForm: true, setCookie: setCookie)
    }

    /// `POST /auth/authorize/provider {request, csrf, provider}`: off to the provider; its callback comes back
    /// into this request (``providerSignedIn(_:request:browserBound:)``).
    func provider(_ input: RequestInput, cookie: String?, address: String?) async throws -> APIResponse {
        let (request, app): (AuthorizationRequest, AppRecord)
        switch try await formRequest(input, cookie: cookie) {
        case .failure(let page): return page
        case .success(let pair): (request, app) = pair
        }
        guard let provider = ProviderID(rawValue: (try? input.string("provider")) ?? ""), provider != .custom,
            signIn.identityProviders[provider] != nil
        else {
            return try signInPage(request, app: app, problem: "Choose one of the ways to sign in below.", status: 400)
        }
        let started: APIResponse
        do {
            started = try await signIn.startAuthorizationSignIn(
                provider: provider, request: try request.seal(key: flowKey), address: address)
        } catch let error as APIError where error.status == 503 {
            // The provider cannot be reached: the same page, saying so, with the other ways in.
            return try signInPage(
                request, app: app,
                problem: "\(signIn.displayName(provider)) cannot be reached right now. Try again in a while, or sign "
                    + "in another way.", status: 503)
        }
        guard let location = started.headers.first(where: { $0.0 == "Location" })?.1 else { return started }
        var onward = Page.response(status: 200, Page.onward(to: location, name: signIn.displayName(provider)))
        onward.headers += started.headers.filter { $0.0 == "Set-Cookie" }
        return onward
    }

    /// A provider vouched for someone in this request's sign-in (``SignInCallback``): the identity becomes a
    /// user, the browser session starts, and the request goes on. The CLI's `/auth/{provider}/start`
    /// (`browserBound` false) starts no browser session: its code goes straight to the CLI's loopback.
    func providerSignedIn(_ vouched: VouchedSignIn, request: AuthorizationRequest, browserBound: Bool)
        async throws -> APIResponse
    {
        let provider = vouched.provider
        let isCLI = request.clientID == CLIClient.clientID
        guard let app = try await client(clientID: request.clientID),
            CLIClient.redirectAllowed(request.redirectURI, for: app), browserBound || isCLI
        else {
            return Page.response(status: 400, Page.staleAppForm)
        }
        let user: UserRecord
        switch try await store.signIn(vouched.identity, now: now) {
        case .user(let found): user = found
        case .unlinked(let former):
            let unlinked = "\(displayName(provider)) account was unlinked from the user \(former)"
            guard isCLI else {
                throw SignInRedirect(
                    reason: "unlinked",
                    response: Page.response(
                        status: 400,
                        Page.message(title: "Not signed in", text: "This " + unlinked + ". Sign in another way.")))
            }
            throw SignInRedirect(
                reason: "unlinked",
                response: request.answer(
                    [
                        ("error", OAuthErrorCode.accessDenied.rawValue),
                        (
                            "error_description",
                            "this " + unlinked + "; sign in another way and run broker link --provider "
                                + "\(provider.rawValue) to attach it again"
                        ),
                    ], issuer: issuer, fromForm: false))
        }
        if isCLI {
            logger.info("signed in", metadata: ["broker.provider": "\(provider)", "broker.user": "\(user.id)"])
            audit.record(
                "sign_in", user: user.id, fields: vouched.details.merging(["provider": provider.rawValue]) { $1 })
        } else {
            logger.info(
                "signed in for an app", metadata: ["broker.provider": "\(provider)", "broker.user": "\(user.id)"])
            audit.record(
                "sign_in", user: user.id,
                fields: vouched.details.merging(["provider": provider.rawValue, "flow": "app"]) { $1 })
        }
        guard browserBound else {
            let code = try await codes.mint(
                request, user: user.id, signedInWith: provider, authTime: now, browserSession: nil)
            return request.answer([("code", code)], issuer: issuer, fromForm: false)
        }
        let (session, setCookie) = try await sessions.start(user: user.id, signedInWith: provider)
        return try await afterSignIn(request, app: app, session: session, fromForm: false, setCookie: setCookie)
    }

    // MARK: Consent and the code

    /// Signed in: consent (unless first-party or remembered), then the code.
    private func afterSignIn(
        _ request: AuthorizationRequest, app: AppRecord, session: BrowserSessionRecord, fromForm: Bool,
        setCookie: String?
    ) async throws -> APIResponse {
        var response: APIResponse
        if let expected = request.expectedSubject, expected != tokens.subject(of: session.userID, for: app) {
            response = errorRedirect(
                request, .loginRequired, "signed in as another user than id_token_hint names", page: fromForm)
        } else if !strongEnough(request, app: app, acr: AuthenticationContext.acr(session.signedInWith)) {
            // Core 5.5.1.1: an essential acr that the sign-in did not reach is a failed authentication.
            let asked =
                app.requireMFA
                ? AuthenticationContext.twoFactors
                : request.claims?.idToken["acr"]?.values?.joined(separator: " ") ?? ""
            response = errorRedirect(
                request, .unmetAuthenticationRequirements, "the app insists on a stronger sign-in (acr \(asked))",
                page: fromForm)
        } else if try await needsConsent(request, app: app, user: session.userID) {
            if request.prompt.contains("none") {
                response = errorRedirect(
                    request, .consentRequired, "the user has not allowed this app", page: fromForm)
            } else {
                let sealed = try request.seal(key: flowKey)
                let user = try await store.user(id: session.userID)
                response = try FormGuard.page(secure: secure) { csrf in
                    Page.appConsent(
                        app: app, user: user?.email ?? user?.name ?? session.userID.description,
                        scopes: request.consentScopes, resource: request.resource, request: sealed, csrf: csrf)
                }
            }
        } else {
            response = try await issueCode(request, session: session, fromForm: fromForm)
        }
        if let setCookie { response.headers.append(("Set-Cookie", setCookie)) }
        return response
    }

    private func needsConsent(_ request: AuthorizationRequest, app: AppRecord, user: UserID) async throws -> Bool {
        if app.firstParty { return false }
        if request.prompt.contains("consent") { return true }
        guard let allowed = try await store.consent(user: user, clientID: app.clientID) else { return true }
        return !Set(request.consentScopes).isSubset(of: Set(allowed))
    }

    /// `POST /auth/authorize/consent {request, csrf, decision}`: Allow remembers the scopes and sends the code;
    /// Deny sends `access_denied`.
    func consent(_ input: RequestInput, cookie: String?) async throws -> APIResponse {
        let (request, app): (AuthorizationRequest, AppRecord)
        switch try await formRequest(input, cookie: cookie) {
        case .failure(let page): return page
        case .success(let pair): (request, app) = pair
        }
        guard let session = try await sessions.current(cookie: cookie) else {
            return try signInPage(request, app: app, problem: "Your sign-in ended; sign in again.")
        }
        guard (try? input.string("decision")) == "allow" else {
            audit.record("app_consent", outcome: "failure", user: session.userID, fields: ["client_id": app.clientID])
            metrics.appAuthorization(outcome: "access_denied")
            return FormGuard.clearing(
                errorRedirect(request, .accessDenied, "the user did not allow the app", page: true), secure: secure)
        }
        try await store.recordConsent(
            user: session.userID, clientID: app.clientID, scopes: request.consentScopes, now: now)
        audit.record("app_consent", user: session.userID, fields: ["client_id": app.clientID])
        return FormGuard.clearing(try await issueCode(request, session: session, fromForm: true), secure: secure)
    }

    /// The code, at the app's redirect URI: a 302 from a GET; after a form, a page that moves on by itself (a
    /// redirect answering a form would meet the page's `form-action 'self'`).
    private func issueCode(_ request: AuthorizationRequest, session: BrowserSessionRecord, fromForm: Bool)
        async throws -> APIResponse
    {
        // The account page is the broker's own: its sign-in ends in the browser session, and no code is minted.
        if request.clientID == AccountPageClient.clientID {
            return AccountPageClient.home(said: request.state.flatMap(AccountPageClient.Said.init(rawValue:)))
        }
        let code = try await codes.mint(
            request, user: session.userID, signedInWith: session.signedInWith, authTime: session.authTime,
            browserSession: session.id)
        metrics.appAuthorization(outcome: "code")
        return request.answer([("code", code)], issuer: issuer, fromForm: fromForm)
    }
}

/// The broker's own sign-in in a browser (``BrowserSessionRecord``): an opaque random cookie whose SHA-256
/// names a row, `HttpOnly; SameSite=Lax`, with `Secure` and the `__Host-` prefix when the issuer is https.
struct BrowserSessions: Sendable {
    let store: any Store
    let tokens: TokenIssuer

    var secure: Bool { tokens.issuer.lowercased().hasPrefix("https://") }
    var cookieName: String { secure ? "__Host-broker_session" : "broker_session" }

    /// The live session the request's cookie names.
    func current(cookie header: String?) async throws -> BrowserSessionRecord? {
        for value in CookieHeader.values(cookieName, in: header) {
            guard value.utf8.count == 43, Base64URL.decode(value) != nil else { continue }
            if let session = try await store.browserSession(cookieHash: Digest.sha256(String(value)), now: tokens.now) {
                return session
            }
        }
        return nil
    }

    /// A new session for `user` and the `Set-Cookie` that carries it.
    func start(user: UserID, signedInWith: ProviderID) async throws -> (BrowserSessionRecord, String) {
        let value = try SecureRandom.token(byteCount: 32)
        let ttl = tokens.configuration.browserSessionTTL
        let session = BrowserSessionRecord(
            id: try SecureRandom.argumentSafeToken(byteCount: 16), userID: user, signedInWith: signedInWith,
            authTime: tokens.now,
            expiresAt: tokens.now + ttl)
        try await store.createBrowserSession(session, cookieHash: Digest.sha256(value))
        return (session, cookie(value, maxAge: ttl))
    }

    func cookie(_ value: String, maxAge: Int64) -> String {
        "\(cookieName)=\(value); Path=/; Max-Age=\(maxAge); HttpOnly; SameSite=Lax" + (secure ? "; Secure" : "")
    }
}
