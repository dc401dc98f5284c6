import BrokerCore
import BrokerCredentials
import BrokerCrypto
import BrokerStore

/// The pages an app's sign-in shows (issue "Sign in to any app"): plain HTML that works without script, in the
/// house look, labelled, a CSRF token in every form, no framing, no referrer (``Page/headers``).
extension Page {
    /// What a scope lets the app see, as the consent page says it.
    static func scopeMeaning(_ scope: String) -> String {
        switch scope {
        case "openid": "Know who you are (your broker user id)"
        case "profile": "See your name"
        case "email": "See your email address"
        case "offline_access": "Stay signed in while you are away"
        default: "Use “\(scope)”"
        }
    }

    /// The sign-in page naming the app: a button per provider (each round trip returns into this request) and
    /// the email and password form.
    package static func appSignIn(
        app: String, request: String, csrf: String, providers: [(id: String, name: String)], password: Bool,
        email: String?, problem: String?, canReset: Bool = false, passkeys: Bool = false,
        icons: [String: String] = [:]
    ) -> String {
        var body = "<p>Sign in to continue to <strong>\(HTML.escape(app))</strong>.</p>\n"
        if let problem { body += "<p class=\"problem\" role=\"alert\">\(HTML.escape(problem))</p>\n" }
        let hidden = """
            <input type="hidden" name="request" value="\(HTML.escape(request))">
            <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
            """
        if password {
            body += """
                <form method="post" action="/auth/authorize/password">
                \(hidden)
                <label for="email">Email</label>
                <input type="email" id="email" name="email" value="\(HTML.escape(email ?? ""))" autocomplete="\(passkeys ? "username webauthn" : "username")" required autofocus>
                <label for="password">Password</label>
                <input type="password" id="password" name="password" autocomplete="current-password" required>
                <button type="submit">Sign in</button>
                </form>

                """
            if !providers.isEmpty || passkeys { body += "<p class=\"or\">or</p>\n" }
        }
        if passkeys {
            body += passkeySignIn(action: "/auth/authorize/passkey", hidden: [("request", request), ("csrf", csrf)])
        }
        for provider in providers {
            body += """
                <form method="post" action="/auth/authorize/provider">
                \(hidden)
                <input type="hidden" name="provider" value="\(HTML.escape(provider.id))">
                <button type="submit" class="secondary">\(ProviderIcon.tag(icons[provider.id]))Sign in with \(HTML.escape(provider.name))</button>
                </form>

                """
        }
        if password {
            let register = "/auth/authorize/register?" + FormEncoding.encode([("request", request)])
            body += "<p class=\"muted\"><a href=\"\(HTML.escape(register))\">Create an account</a>"
            if canReset {
                body +=
                    " · <a href=\"/auth/password/forgot\">"
                    + (passkeys ? "Forgot your password or lost your passkey?" : "Forgot your password?") + "</a>"
            }
            body += "</p>\n"
        } else if passkeys && canReset {
            body += "<p class=\"muted\"><a href=\"/auth/password/forgot\">Lost your passkey?</a></p>\n"
        }
        return document(title: "Sign in to \(app)", body: body)
    }

    /// A new account for an app's user: email, password (twice), and an optional name.
    static func appRegister(app: String, request: String, csrf: String, email: String?, problem: String?) -> String {
        var body = "<p>Create an account to continue to <strong>\(HTML.escape(app))</strong>.</p>\n"
        if let problem { body += "<p class=\"problem\" role=\"alert\">\(HTML.escape(problem))</p>\n" }
        body += """
            <form method="post" action="/auth/authorize/register">
            <input type="hidden" name="request" value="\(HTML.escape(request))">
            <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
            <label for="email">Email</label>
            <input type="email" id="email" name="email" value="\(HTML.escape(email ?? ""))" autocomplete="username" required autofocus>
            <label for="password">Password (at least 8 characters)</label>
            <input type="password" id="password" name="password" autocomplete="new-password" required minlength="8">
            <label for="name">Your name (optional)</label>
            <input type="text" id="name" name="name" autocomplete="name">
            <button type="submit">Create the account</button>
            </form>
            """
        return document(title: "Create an account", body: body)
    }

    /// The second step of a password sign-in for an account with a second factor: the code from the
    /// authenticator app, or a recovery code. `action` is the form's target (the app's or the device's page);
    /// `fields` the hidden fields that carry the flow (the request or the user code), beside the ticket.
    static func secondFactor(
        action: String, fields: [(String, String)], ticket: String, csrf: String, continuing: String, problem: String?,
        mailRecovery: Bool = false, passkey: String? = nil
    ) -> String {
        var body =
            "<p>Enter the code your authenticator app shows to continue to <strong>\(HTML.escape(continuing))</strong>.</p>\n"
        if let problem { body += "<p class=\"problem\" role=\"alert\">\(HTML.escape(problem))</p>\n" }
        body += "<form method=\"post\" action=\"\(HTML.escape(action))\">\n"
        for (name, value) in fields + [("ticket", ticket), ("csrf", csrf)] {
            body += "<input type=\"hidden\" name=\"\(HTML.escape(name))\" value=\"\(HTML.escape(value))\">\n"
        }
        body += """
            <label for="otp">Code</label>
            <input type="text" id="otp" name="otp" inputmode="numeric" autocomplete="one-time-code" required autofocus maxlength="16">
            <button type="submit">Continue</button>
            </form>
            <p class="muted">Lost the app? Type one of your recovery codes instead (each works once).</p>
            """
        if let passkey { body += "\n<p class=\"or\">or</p>\n" + passkey }
        if mailRecovery {
            body +=
                "\n<p class=\"muted\">Lost the codes too? <a href=\"/auth/mfa/recover\">Remove the second factor "
                + "through a link to your address</a> (it asks for your password).</p>"
        }
        return document(title: "Two-step sign-in", body: body)
    }

    /// The forgot-password form: an address, and a mailed link to the reset page.
    static func forgotForm(csrf: String, passkeys: Bool = false) -> String {
        document(
            title: passkeys ? "Forgot your password or lost your passkey?" : "Forgot your password?",
            body: """
                <p>\(passkeys
                    ? "We will mail a link to the address, if an account uses it: to choose a new password, or, for an account that signs in with passkeys only, to add a new passkey."
                    : "We will mail a link to choose a new password to the address, if an account uses it.")</p>
                <form method="post" action="/auth/password/forgot">
                <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
                <label for="email">Email</label>
                <input type="email" id="email" name="email" autocomplete="username" required autofocus>
                <button type="submit">Mail me a link</button>
                </form>
                """)
    }

    /// The consent page: the app, the account, what it asks for; Allow or Deny.
    /// An app that registered itself (RFC 7591) is said to have done so, with the host its redirect URI names
    /// and the name it gave, marked as its own; `resource` is the API the token will be for (RFC 8707).
    static func appConsent(
        app: AppRecord, user: String, scopes: [String], resource: String?, request: String, csrf: String
    ) -> String {
        let shown = app.registration?.clientName ?? app.clientID
        var body = """
            <p><strong>\(HTML.escape(shown))</strong> asks to:</p>
            <ul>

            """
        for scope in scopes { body += "<li>\(HTML.escape(scopeMeaning(scope)))</li>\n" }
        body += "</ul>\n"
        if let resource {
            body += "<p>Its access will be to <strong>\(HTML.escape(resource))</strong> only.</p>\n"
        }
        if let registration = app.registration {
            let host = RegistrationService.redirectHost(app)
            let how =
                registration.mode == ClientMetadataDocuments.mode
                ? "This app describes itself in a document at <strong>"
                    + HTML.escape(APIURL(app.clientID)?.host ?? app.clientID) + "</strong>; it is not registered "
                    + "with this broker, and nobody has checked who runs it."
                : "This app registered itself with this broker; nobody has checked who runs it."
            let destination =
                switch host {
                case nil: "an app on this device"
                case let host? where LoopbackHost.contains(host):
                    "an app on this device (<strong>\(HTML.escape(host))</strong>)"
                case let host?: "<strong>\(HTML.escape(host))</strong>"
                }
            body += """
                <p class="asking">\(how) Its name is its own claim. It will receive the answer at \(destination). \
                Allow it only if you started this sign-in from that app.</p>
                <p class="muted">Client id \(HTML.escape(app.clientID))</p>

                """
        }
        body += """
            <p class="muted">Signed in as \(HTML.escape(user)).</p>
            <form method="post" action="/auth/authorize/consent">
            <input type="hidden" name="request" value="\(HTML.escape(request))">
            <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
            <button type="submit" name="decision" value="allow">Allow</button>
            <button type="submit" name="decision" value="deny" class="secondary">Deny</button>
            </form>
            """
        return document(title: "Allow \(shown)?", body: body)
    }

    /// Back to the app at once (a refresh, no script): after a form, where a redirect would meet the page's
    /// `form-action 'self'`. The page sends no referrer, so the code in the URL goes nowhere else.
    static func appOnward(to url: String) -> String {
        let escaped = HTML.escape(url)
        return document(
            title: "Returning to the app…",
            body: """
                <meta http-equiv="refresh" content="0;url=\(escaped)">
                <p><a href="\(escaped)">Continue</a></p>
                """)
    }

    /// The script that submits a form-post answer (its SHA-256 is the one script the page's policy allows).
    static let formPostScript = "document.forms[0].submit();"

    /// The page of `response_mode=form_post`: the answer's fields in a form posted to `redirectURI` by the one
    /// inline script its policy allows, or by the visible button without script. `form-action` names only the
    /// redirect URI's origin.
    static func formPost(to redirectURI: String, _ fields: [(String, String)]) -> APIResponse {
        let inputs = fields.map {
            "<input type=\"hidden\" name=\"\(HTML.escape($0.0))\" value=\"\(HTML.escape($0.1))\">"
        }.joined(separator: "\n")
        let html = document(
            title: "Returning to the app…",
            body: """
                <form method="post" action="\(HTML.escape(redirectURI))">
                \(inputs)
                <noscript><button type="submit">Continue</button></noscript>
                </form>
                <script>\(formPostScript)</script>
                """)
        let hash = Base64URL.encodeStandard(Digest.sha256(formPostScript))
        var response = Page.response(status: 200, html)
        response.headers = response.headers.map { header in
            guard header.0 == "Content-Security-Policy" else { return header }
            return (
                header.0,
                "default-src 'none'; script-src 'sha256-\(hash)'; img-src data:; style-src 'unsafe-inline'; "
                    + "form-action \(AppRules.origin(redirectURI) ?? "'none'"); frame-ancestors 'none'; base-uri 'none'"
            )
        }
        return response
    }

    static let staleAppForm = message(
        title: "This sign-in page has expired",
        text: "Go back to the app and sign in again (the page was open too long, or opened in another browser).")
}
