import BrokerCore
import BrokerQR
import BrokerStore

/// The account page's HTML (``AccountPageService``): server-rendered in the house look, every value escaped, one
/// small form per change with the CSRF token, no script (adding a passkey happens on the passkey page, whose
/// script is the ceremony's).
extension Page {
    /// A time as people read it, in UTC: `2026-12-06 07:44 UTC`.
    static func when(_ epochSeconds: Int64) -> String {
        let text = RFC3339.format(epochSeconds: epochSeconds)
        return String(text.prefix(16)).replacingTheT + " UTC"
    }

    /// A one-button form to `/auth/account/page/ACTION` with hidden `fields`.
    static func accountButton(
        _ action: String, _ label: String, csrf: String, fields: [(String, String)] = [], style: String = "inline"
    ) -> String {
        var form = "<form method=\"post\" action=\"/auth/account/page/\(HTML.escape(action))\">"
        for (name, value) in fields + [("csrf", csrf)] {
            form += "<input type=\"hidden\" name=\"\(HTML.escape(name))\" value=\"\(HTML.escape(value))\">"
        }
        return form + "<button type=\"submit\" class=\"\(style)\">\(HTML.escape(label))</button></form>"
    }

    /// One row: what it is (trusted markup) and, on the right, its button.
    private static func row(_ what: String, _ button: String = "") -> String {
        "<li><div>\(what)</div>\(button)</li>\n"
    }

    static func account(_ view: AccountView) -> String {
        let csrf = view.csrf
        let user = view.user
        var body = "<p>Signed in as <strong>\(HTML.escape(user.email ?? user.name ?? user.id.description))</strong>"
        body += " with \(HTML.escape(view.signedInWith)).</p>\n"
        if let said = view.said {
            let (text, problem) = said.text
            body += "<p class=\"\(problem ? "problem" : "said")\" role=\"status\">\(HTML.escape(text))</p>\n"
        }
        if let problem = view.problem { body += "<p class=\"problem\" role=\"alert\">\(HTML.escape(problem))</p>\n" }

        // The last way in has no button to remove it (the broker refuses that anyway).
        let several = view.ways.count + view.passkeys.count > 1
        body += "<h2>Ways in</h2>\n<ul class=\"items\">\n"
        for way in view.ways {
            let since = way.since.map { " · linked \(when($0))" } ?? ""
            body += row(
                "<strong>\(HTML.escape(way.name))</strong><br><span class=\"muted\">\(HTML.escape(way.detail))\(since)</span>",
                several ? accountButton("unlink", "Unlink", csrf: csrf, fields: [("provider", way.provider)]) : "")
        }
        for provider in view.linkable {
            body += row(
                "<span class=\"muted\">\(HTML.escape(provider.name)): not linked</span>",
                accountButton(
                    "link", "Link", csrf: csrf, fields: [("provider", provider.id)], style: "inline secondary"))
        }
        body += "</ul>\n"
        if view.canAddPassword {
            body += """
                <form method="post" action="/auth/account/page/link-password">
                <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
                <label for="link-email">Add an email and password: the address</label>
                <input type="email" id="link-email" name="email" autocomplete="email" required>
                <label for="link-password">A password (at least 8 characters)</label>
                <input type="password" id="link-password" name="password" autocomplete="new-password" required minlength="8">
                <button type="submit" class="secondary">Add the email and password</button>
                </form>

                """
        }

        if view.passkeysEnabled || !view.passkeys.isEmpty {
            body += "<h2>Passkeys</h2>\n<ul class=\"items\">\n"
            for passkey in view.passkeys {
                let used = passkey.lastUsed.map { " · last used \(when($0))" } ?? " · never used"
                body += row(
                    "<strong>\(HTML.escape(passkey.name))</strong><br><span class=\"muted\">added \(when(passkey.since))\(used)</span>",
                    several ? accountButton("passkey-remove", "Remove", csrf: csrf, fields: [("id", passkey.id)]) : "")
            }
            if view.passkeys.isEmpty { body += row("<span class=\"muted\">No passkey yet.</span>") }
            body += "</ul>\n"
            if view.passkeysEnabled {
                body += accountButton("passkey-add", "Add a passkey", csrf: csrf, style: "secondary")
            }
        }

        if let factor = view.secondFactor {
            body += "<h2>Second factor</h2>\n"
            switch factor {
            case .off:
                body += "<p class=\"muted\">Sign-ins with your password ask for nothing more.</p>\n"
                body += accountButton("mfa-add", "Add an authenticator app", csrf: csrf, style: "secondary")
            case .on(let since, let left):
                body +=
                    "<p>An authenticator app, since \(when(since)). \(left) recovery code\(left == 1 ? "" : "s") left.</p>\n"
                body += """
                    <form method="post" action="/auth/account/page/recovery-codes">
                    <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
                    <label for="codes-otp">A code from the app, for new recovery codes</label>
                    <input type="text" id="codes-otp" name="code" inputmode="numeric" autocomplete="one-time-code" required maxlength="16">
                    <button type="submit" class="secondary">Make new recovery codes</button>
                    </form>
                    <form method="post" action="/auth/account/page/mfa-remove">
                    <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
                    <label for="remove-otp">A code from the app, to remove it</label>
                    <input type="text" id="remove-otp" name="code" inputmode="numeric" autocomplete="one-time-code" required maxlength="16">
                    <button type="submit" class="danger">Remove the second factor</button>
                    </form>

                    """
            }
        }

        body += "<h2>Sessions</h2>\n<ul class=\"items\">\n"
        for browser in view.browsers {
            let what =
                browser.current
                ? "<strong>This browser</strong>" : "<strong>A browser</strong>"
            body += row(
                "\(what)<br><span class=\"muted\">with \(HTML.escape(browser.signedInWith)) · \(when(browser.since))</span>",
                browser.current
                    ? accountButton("sign-out", "Sign out", csrf: csrf)
                    : accountButton("browser", "Sign out", csrf: csrf, fields: [("id", browser.id)]))
        }
        for session in view.sessions {
            let way = session.signedInWith.map { "with \(HTML.escape($0)) · " } ?? ""
            body += row(
                "<strong>\(HTML.escape(session.client))</strong><br><span class=\"muted\">\(way)\(when(session.since))</span>",
                accountButton("session", "End", csrf: csrf, fields: [("id", session.id)]))
        }
        body += "</ul>\n"

        body += "<h2>Apps you allowed</h2>\n<ul class=\"items\">\n"
        for app in view.apps {
            var detail: [String] = []
            if !app.scopes.isEmpty { detail.append(app.scopes.map(scopeMeaning).joined(separator: "; ")) }
            if let since = app.since { detail.append("allowed \(when(since))") }
            if app.sessions > 0 { detail.append("\(app.sessions) session\(app.sessions == 1 ? "" : "s")") }
            body += row(
                "<strong>\(HTML.escape(app.clientID))</strong><br><span class=\"muted\">\(HTML.escape(detail.joined(separator: " · ")))</span>",
                accountButton("app", "Revoke", csrf: csrf, fields: [("client_id", app.clientID)]))
        }
        if view.apps.isEmpty { body += row("<span class=\"muted\">None.</span>") }
        body += "</ul>\n"

        body += "<h2>Your data</h2>\n"
        body += accountButton("export", "Download everything broker keeps about you", csrf: csrf, style: "secondary")
        body += """
            <form method="post" action="/auth/account/page/delete">
            <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
            <label for="confirm">Type DELETE to delete your account</label>
            <input type="text" id="confirm" name="confirm" autocomplete="off" required>

            """
        if view.hasPassword {
            body += """
                <label for="delete-password">Your password</label>
                <input type="password" id="delete-password" name="password" autocomplete="current-password" required>

                """
        }
        body += """
            <button type="submit" class="danger">Delete my account</button>
            </form>
            <p class="muted">Changing how you sign in (linking, unlinking, passkeys, the second factor, deletion) asks \
            for a sign-in within the last ten minutes\(view.secondFactor.map { if case .on = $0 { return ", with both factors" } else { return "" } } ?? "").</p>
            """
        return HTML.document(title: "Your account", body: body, wide: true)
    }

    /// The second step of adding an authenticator app: the QR code, the key as text, and the first code.
    static func accountEnrolment(uri: String, key: String, enrolment: String, csrf: String, problem: String?) -> String
    {
        var body = "<p>Scan this with your authenticator app, or type the key into it.</p>\n"
        if let problem { body += "<p class=\"problem\" role=\"alert\">\(HTML.escape(problem))</p>\n" }
        if let svg = QRCode.svg(uri) { body += "<div class=\"qr\">\(svg)</div>\n" }
        // Groups of four, as apps show keys; the URI for whoever adds it by link.
        var grouped = ""
        for (index, character) in key.enumerated() {
            if index > 0 && index % 4 == 0 { grouped += " " }
            grouped.append(character)
        }
        body += """
            <p class="muted">Key: <span class="code">\(HTML.escape(grouped))</span><br>
            <a href="\(HTML.escape(uri))">Open in an authenticator app on this device</a></p>
            <form method="post" action="/auth/account/page/mfa-confirm">
            <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
            <input type="hidden" name="enrolment" value="\(HTML.escape(enrolment))">
            <label for="code">The code the app shows now</label>
            <input type="text" id="code" name="code" inputmode="numeric" autocomplete="one-time-code" required autofocus maxlength="16">
            <button type="submit">Turn on the second factor</button>
            </form>
            <p class="muted"><a href="/account">Cancel</a></p>
            """
        return HTML.document(title: "Add an authenticator app", body: body)
    }

    /// Recovery codes, shown once.
    static func accountRecoveryCodes(_ codes: [String], added: Bool) -> String {
        var body =
            added
            ? "<p>Your second factor is on. Keep these recovery codes somewhere safe: each signs you in once if you lose the app.</p>\n"
            : "<p>Your new recovery codes: the old ones no longer work. Each signs you in once if you lose the app.</p>\n"
        body += "<ul class=\"codes\">\n"
        for code in codes { body += "<li class=\"code\">\(HTML.escape(code))</li>\n" }
        body += "</ul>\n<p class=\"muted\">They are shown only now.</p>\n"
        body += "<p><a href=\"/account\">Back to your account</a></p>"
        return HTML.document(title: "Your recovery codes", body: body)
    }

    static let staleAccountForm = document(
        title: "This page has expired",
        body: "<p>The page was open too long, or opened in another tab since. "
            + "<a href=\"/account\">Open your account page again</a>.</p>")
}

extension String {
    /// `2026-12-06T07:44` as `2026-12-06 07:44`.
    fileprivate var replacingTheT: String {
        String(unicodeScalars.map { $0 == "T" ? " " : Character($0) })
    }
}
