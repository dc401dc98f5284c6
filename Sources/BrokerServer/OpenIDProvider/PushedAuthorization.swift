import BrokerCore
import BrokerCrypto
import BrokerStore

/// Pushed authorization requests (RFC 9126, issue "Logout everywhere…" item 4): an app posts its authorization
/// request to `/auth/par`, authenticated as at the token endpoint, and sends the browser with only `client_id`
/// and the `request_uri` it got back. The request's parameters never pass through the browser, cannot be
/// altered there, and were checked before the person sees a page. The `request_uri` is stored (its SHA-256) so
/// any broker redeems it, once, within ``lifetime`` seconds. `server.require_par` (or `broker client add
/// --require-par` for one app) refuses authorization requests that were not pushed.
extension AuthorizationService {
    /// How long a `request_uri` lives (the 60 s; RFC 9126 §2.2 suggests 5–600).
    static let pushedLifetime: Int64 = 60
    /// The `request_uri` scheme RFC 9126 §2.2 uses.
    static let requestURIPrefix = "urn:ietf:params:oauth:request_uri:"

    /// The authorization request parameters a pushed request keeps (RT3-7, RT3-8): what `/auth/authorize` reads.
    /// Client credentials (`client_secret`, an assertion) and anything unknown are dropped before it is stored.
    static let pushedParameters: Set<String> = [
        "response_type", "client_id", "redirect_uri", "scope", "state", "nonce", "code_challenge",
        "code_challenge_method", "prompt", "max_age", "login_hint", "id_token_hint", "response_mode", "ui_locales",
        "acr_values", "claims", "resource", "request",
    ]

    /// `POST /auth/par` for `app` (already authenticated): 201 `{request_uri, expires_in}`, or 400 with the error
    /// the authorization endpoint would have sent to the redirect URI.
    /// Every push first takes from the app's and the source `address`'s limits (RT3-8).
    func push(_ parameters: [String: String], app: AppRecord, address: String?) async throws -> APIResponse {
        try await pushesPerApp.admit(
            app.clientID, metrics: metrics, limit: "par_app",
            "too many pushed authorization requests for this app; wait and try again")
        try await pushesPerAddress.admit(
            address, metrics: metrics, limit: "par_address",
            "too many pushed authorization requests from this address; wait and try again")
        if let named = parameters["client_id"], named != app.clientID {
            throw APIError.invalidRequest("client_id is not the authenticated app")
        }
        if parameters["request_uri"] != nil {
            throw APIError.invalidRequest("request_uri cannot be pushed (RFC 9126 §2.1)")
        }
        guard let redirectURI = parameters["redirect_uri"], AppRules.matches(redirectURI, of: app) else {
            throw APIError.invalidRequest("redirect_uri is not one the app registered")
        }
        switch try await check(parameters, app: app, redirectURI: redirectURI) {
        case .refused(_, let error, let description):
            metrics.appAuthorization(outcome: error.rawValue)
            throw APIError(status: 400, code: error, detail: description)
        case .request:
            break
        }
        let requestURI = Self.requestURIPrefix + (try SecureRandom.token(byteCount: 32))
        var kept = parameters.filter { Self.pushedParameters.contains($0.key) }
        kept["client_id"] = app.clientID
        try await store.createPushedRequest(
            PushedRequestRecord(
                clientID: app.clientID,
                parameters: FormEncoding.encode(kept.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }),
                expiresAt: now + Self.pushedLifetime),
            hash: Digest.sha256(requestURI))
        metrics.appAuthorization(outcome: "pushed")
        return APIResponse(
            status: 201,
            body: ["request_uri": .string(requestURI), "expires_in": .int(Self.pushedLifetime)],
            headers: [("Cache-Control", "no-store")])
    }

    /// The parameters pushed under `requestURI` for `app`, taken (a second take finds nothing); `nil` when
    /// unknown, used, expired or another app's.
    func takePushed(_ requestURI: String, app: AppRecord) async throws -> [String: String]? {
        guard requestURI.hasPrefix(Self.requestURIPrefix), requestURI.utf8.count <= 128,
            let pushed = try await store.takePushedRequest(hash: Digest.sha256(requestURI), now: now),
            pushed.clientID == app.clientID, let pairs = FormEncoding.decode(pushed.parameters)
        else { return nil }
        return Dictionary(pairs, uniquingKeysWith: { first, _ in first })
    }
}
