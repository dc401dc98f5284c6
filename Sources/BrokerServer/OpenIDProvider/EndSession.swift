import BrokerCore
import BrokerCrypto
import BrokerStore

/// RP-initiated logout 1.0 at `/auth/end-session` (issue "Logout everywhere…" item 1): the broker's browser
/// session ends, and with it the sessions apps started through it (their refresh tokens stop). With an
/// `id_token_hint` naming this browser session the logout is immediate; without one the person is asked first,
/// so that a cross-site link cannot sign anyone out. The browser goes on only to a `post_logout_redirect_uri`
/// the app registered, matched exactly — never anywhere else.
extension AuthorizationService {
    /// `GET|POST /auth/end-session`.
    func endSession(_ parameters: [String: String], cookie: String?) async throws -> APIResponse {
        var hintSubject: String?
        var hintSession: String?
        var clientID = parameters["client_id"]
        if let hint = parameters["id_token_hint"] {
            guard let claims = tokens.idTokenHintClaims(hint) else {
                return Page.response(
                    status: 400,
                    Page.message(title: "Not signed out", text: "id_token_hint is not an id token of this broker."))
            }
            let audience = claims["aud"]?.stringValue
            if let clientID, clientID != audience {
                return Page.response(
                    status: 400,
                    Page.message(title: "Not signed out", text: "client_id is not the id token's audience."))
            }
            clientID = audience
            hintSubject = claims["sub"]?.stringValue
            hintSession = claims["sid"]?.stringValue
        }
        var destination: String?
        if let uri = parameters["post_logout_redirect_uri"] {
            guard let clientID, let app = try await app(clientID: clientID),
                app.postLogoutRedirectURIs.contains(uri)
            else {
                return Page.response(
                    status: 400,
                    Page.message(
                        title: "Not signed out",
                        text: "The address to return to is not one the app registered (post_logout_redirect_uri)."))
            }
            destination = uri
        }
        let state = parameters["state"].map { String($0.prefix(1024)) }
        guard let session = try await sessions.current(cookie: cookie) else {
            return signedOut(destination: destination, state: state, fromForm: false)
        }
        // The hint names this browser session, or (an id token without sid) its user, by the sub its app knows.
        var hintApp: AppRecord?
        if hintSession == nil, hintSubject != nil, let clientID { hintApp = try await app(clientID: clientID) }
        let matches =
            hintSession.map { $0 == session.id }
            ?? (hintSubject.map { $0 == tokens.subject(of: session.userID, for: hintApp) } ?? false)
        guard matches else {
            // Asked first: a link alone cannot sign anyone out.
            return try FormGuard.page(secure: secure) { csrf in
                Page.endSessionConfirm(
                    csrf: csrf, clientID: clientID, destination: destination, state: state)
            }
        }
        return try await logOut(session, destination: destination, state: state, fromForm: false)
    }

    /// `POST /auth/end-session/confirm {csrf, client_id, post_logout_redirect_uri, state}`: the person said yes.
    func confirmEndSession(_ input: RequestInput, cookie: String?) async throws -> APIResponse {
        guard FormGuard.accepts(cookie: cookie, field: (try? input.string("csrf")) ?? "") else {
            return Page.response(status: 403, Page.staleAppForm)
        }
        var destination: String?
        if let uri = try? input.optionalString("post_logout_redirect_uri") {
            let clientID = (try? input.optionalString("client_id")) ?? ""
            guard let app = try await app(clientID: clientID),
                app.postLogoutRedirectURIs.contains(uri)
            else { return Page.response(status: 400, Page.staleAppForm) }
            destination = uri
        }
        let state = try? input.optionalString("state")
        guard let session = try await sessions.current(cookie: cookie) else {
            return signedOut(destination: destination, state: state, fromForm: true)
        }
        return FormGuard.clearing(
            try await logOut(session, destination: destination, state: state, fromForm: true), secure: secure)
    }

    private func logOut(_ session: BrowserSessionRecord, destination: String?, state: String?, fromForm: Bool)
        async throws -> APIResponse
    {
        let ended = try await store.endBrowserSession(id: session.id, now: now)
        backchannel.kick()
        metrics.revocation(reason: "end_session")
        audit.record(
            "logout", user: session.userID,
            fields: ["browser_session": String(session.id.prefix(8)), "sessions_ended": "\(ended.count)"])
        return signedOut(destination: destination, state: state, fromForm: fromForm)
    }

    /// The browser's session cookie cleared, and on to the app's page (or a page saying so).
    private func signedOut(destination: String?, state: String?, fromForm: Bool) -> APIResponse {
        var response: APIResponse
        if let destination {
            let location =
                state.map {
                    destination + (destination.contains("?") ? "&" : "?") + FormEncoding.encode([("state", $0)])
                }
                ?? destination
            response = fromForm ? Page.response(status: 200, Page.appOnward(to: location)) : .redirect(location)
        } else {
            response = Page.response(
                status: 200, Page.message(title: "You are signed out", text: "You can close this page."))
        }
        response.headers.append(("Set-Cookie", sessions.cookie("", maxAge: 0)))
        return response
    }
}

extension Page {
    static func endSessionConfirm(csrf: String, clientID: String?, destination: String?, state: String?) -> String {
        var hidden = "<input type=\"hidden\" name=\"csrf\" value=\"\(HTML.escape(csrf))\">\n"
        if let clientID { hidden += "<input type=\"hidden\" name=\"client_id\" value=\"\(HTML.escape(clientID))\">\n" }
        if let destination {
            hidden +=
                "<input type=\"hidden\" name=\"post_logout_redirect_uri\" value=\"\(HTML.escape(destination))\">\n"
        }
        if let state { hidden += "<input type=\"hidden\" name=\"state\" value=\"\(HTML.escape(state))\">\n" }
        return document(
            title: "Sign out of broker?",
            body: """
                <p>\(clientID.map { "<strong>\(HTML.escape($0))</strong> asks" } ?? "You asked") to sign you out of \
                broker. Apps you signed in to through it will ask you to sign in again.</p>
                <form method="post" action="/auth/end-session/confirm">
                \(hidden)<button type="submit">Sign out</button>
                </form>
                """)
    }
}
