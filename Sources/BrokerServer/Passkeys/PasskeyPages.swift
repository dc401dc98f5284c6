import BrokerCore

/// The passkey parts of the broker's pages: the form that runs a ceremony (``PasskeyScript``), the page that
/// adds a passkey, and the CLI's loopback sign-in page.
extension Page {
    /// The Content-Security-Policy of a page with a passkey form: the broker's own script and its own
    /// `/auth/passkey/options`, nothing else.
    package static let passkeyPolicy =
        "default-src 'none'; script-src 'self'; connect-src 'self'; img-src data:; style-src 'unsafe-inline'; "
        + "form-action 'self'; "
        + "frame-ancestors 'none'; base-uri 'none'"

    /// `response` (a page) allowed to run ``PasskeyScript``.
    static func withPasskeys(_ response: APIResponse) -> APIResponse {
        var allowed = response
        allowed.headers = response.headers.map {
            $0.0 == "Content-Security-Policy" ? ($0.0, passkeyPolicy) : $0
        }
        return allowed
    }

    static let passkeyScriptTag = "<script src=\"/auth/passkey.js\" defer></script>\n"

    /// "Sign in with a passkey": a form posting to `action` with `hidden` fields, the ceremony and credential
    /// filled in by the script. No email is asked: the browser offers the passkeys it holds for this broker.
    static func passkeySignIn(
        action: String, hidden: [(String, String)], primary: Bool = false, label: String = "Sign in with a passkey"
    ) -> String {
        var form = "<form method=\"post\" action=\"\(HTML.escape(action))\" data-passkey=\"signin\">\n"
        for (name, value) in hidden {
            form += "<input type=\"hidden\" name=\"\(HTML.escape(name))\" value=\"\(HTML.escape(value))\">\n"
        }
        form += """
            <input type="hidden" name="ceremony" value="">
            <input type="hidden" name="credential" value="">
            <p class="problem" role="alert" data-passkey-problem hidden></p>
            <button type="submit"\(primary ? "" : " class=\"secondary\"")>\(HTML.escape(label))</button>
            </form>

            """
        return form + passkeyScriptTag
    }

    /// The page `broker passkey add` opens: who the passkey is for, a name for it, and the button.
    static func passkeyAdd(
        user: String, options: JSONValue, ceremony: String, csrf: String, recovery: Bool = false
    ) -> String {
        let intro =
            recovery
            ? """
            <p>Recover <strong>\(HTML.escape(user))</strong> with a new passkey. When it is added, every session of \
            this account is signed out; your other passkeys keep working (remove a lost one with \
            <code>broker passkey remove</code>).</p>
            """
            : """
            <p>Add a passkey to <strong>\(HTML.escape(user))</strong>: this device (or your phone) will sign \
            you in to broker without a password.</p>
            """
        return document(
            title: recovery ? "Recover your account" : "Add a passkey",
            body: intro + """

                <form method="post" action="/auth/passkey/add" data-passkey="register" data-options="\(HTML.escape(options.serialized()))">
                <input type="hidden" name="ceremony" value="\(HTML.escape(ceremony))">
                <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
                <input type="hidden" name="credential" value="">
                <label for="name">A name for it (optional)</label>
                <input type="text" id="name" name="name" maxlength="64" placeholder="Laptop" autocomplete="off">
                <p class="problem" role="alert" data-passkey-problem hidden></p>
                <button type="submit">Add a passkey</button>
                </form>
                """ + passkeyScriptTag)
    }

    static func passkeyAdded(name: String, recovery: Bool = false, accountPage: Bool = false) -> String {
        if accountPage {
            return document(
                title: "Passkey added",
                body: "<p>“\(HTML.escape(name))” now signs you in to broker.</p>\n"
                    + "<p><a href=\"/account\">Back to your account</a></p>")
        }
        return message(
            title: "Passkey added",
            text: recovery
                ? "“\(name)” now signs you in to broker. Every session of this account was signed out: sign in again with the new passkey."
                : "“\(name)” now signs you in to broker. You can close this tab and return to the terminal.")
    }

    static let recoveryLinkGone = message(
        title: "This link no longer works",
        text:
            "Recovery links work once, for thirty minutes, and only the newest one. Ask for a new one: “Forgot your password?” on the sign-in page."
    )

    /// The CLI's loopback sign-in with a passkey (`broker login --provider passkey`).
    static func passkeyLoopback(flow: String, csrf: String, problem: String? = nil) -> String {
        var body = "<p>Sign in to broker with a passkey for the command line.</p>\n"
        if let problem { body += "<p class=\"problem\" role=\"alert\">\(HTML.escape(problem))</p>\n" }
        body += passkeySignIn(
            action: "/auth/passkey/finish", hidden: [("flow", flow), ("csrf", csrf)], primary: true)
        return document(title: "Sign in with a passkey", body: body)
    }

    static let passkeyTicketGone = message(
        title: "This link no longer works",
        text:
            "Links to add a passkey work once, for ten minutes, while the session that asked is signed in. Run broker passkey add again."
    )

    static let passkeysOff = message(
        title: "Passkeys are off",
        text: "This broker has no passkeys: its address is an IP address, which browsers refuse for passkeys.")
}
