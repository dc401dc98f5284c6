import BrokerCore
import BrokerStore

/// The broker's own web pages (password reset): server-rendered HTML with no script and no external asset,
/// every value escaped, readable at a phone's width; sent with a strict Content-Security-Policy, no framing,
/// no caching and no referrer (the page's URL carries a secret).
enum Page {
    static let headers: [(String, String)] = [
        ("Content-Type", "text/html; charset=utf-8"),
        (
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
        ("X-Frame-Options", "DENY"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("Cache-Control", "no-store"),
    ]

    static func response(status: Int, _ html: String) -> APIResponse {
        var response = APIResponse(status: status, body: .null, headers: headers)
        response.html = html
        return response
    }

    /// A whole document around `body` (trusted markup: callers escape what they put in), in the look the
    /// CLI's loopback page shares (``HTML/document(title:body:tone:)``).
    static func document(title: String, body: String) -> String { HTML.document(title: title, body: body) }

    static func message(title: String, text: String) -> String {
        document(title: title, body: "<p>\(HTML.escape(text))</p>")
    }

    static let expiredLink = message(
        title: "This link no longer works",
        text: "Reset links work once, for 30 minutes, and only the newest one. Ask for a new link and use it soon.")

    static let expiredVerification = message(
        title: "This link no longer works",
        text:
            "Confirmation links work once, for 24 hours, and only the newest one. Ask for a new one: broker register --resend --email you@example.com"
    )

    static let staleForm = message(
        title: "This form has expired",
        text:
            "The page was not opened from this browser, or it was opened too long ago. Open the link in your mail again."
    )

    /// The confirmation page: one button, so that fetching the link alone (a mail scanner) spends nothing.
    /// The ways in a page names, "Google and Microsoft account".
    static func list(_ names: [String]) -> String {
        let escaped = names.map(HTML.escape)
        guard escaped.count > 1, let last = escaped.last else { return escaped.first ?? "" }
        return escaped.dropLast().joined(separator: ", ") + " and " + last
    }

    static func verifyForm(token: String, csrf: String, email: String?, otherWaysIn: [String] = []) -> String {
        var body = ""
        if let email { body += "<p>Confirm that <strong>\(HTML.escape(email))</strong> is your address.</p>\n" }
        if !otherWaysIn.isEmpty {
            // RT2-5: the address was added to an account with other ways in; its owner sees whose it joins.
            body += """
                <p class="problem" role="alert">Confirming makes this address a way into a broker account that \
                also signs in with \(list(otherWaysIn)). If you did not add it to an account of yours yourself, \
                do not confirm: close this page, and the address stays free for you to register.</p>

                """
        }
        body += """
            <form method="post" action="/auth/verify">
            <input type="hidden" name="token" value="\(HTML.escape(token))">
            <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
            <button type="submit">Confirm my address</button>
            </form>
            """
        return document(title: "Confirm your email address", body: body)
    }

    // MARK: The device flow

    static let deviceGone = message(
        title: "This sign-in is no longer waiting",
        text:
            "The code expired, was used, or was denied. Start again on the device (broker login --device) and enter the new code."
    )

    /// An app sign-in's provider step came back to a browser that did not start it (RT3-2).
    static let appOtherBrowser = message(
        title: "Finish in the browser where you started",
        text:
            "This sign-in was started in another browser. If a link brought you here, you were not signed in: go "
            + "back to the app you want to use and sign in from there."
    )

    /// A device sign-in's provider step came back to a browser that did not type the code (RT2-4).
    static let deviceOtherBrowser = message(
        title: "Finish in the browser where you typed the code",
        text:
            "This sign-in was started in another browser. If a link brought you here, nobody needs you to follow it: "
            + "to sign in a device of your own, open /device in this browser and type the code the device shows."
    )

    static let staleDeviceForm = message(
        title: "This form has expired",
        text: "The page was opened in another browser or too long ago. Open the device page again and enter the code.")

    /// `GET /device`: where the person types the code the device shows.
    static func deviceEntry(code: String, problem: String?) -> String {
        var body = "<p>Enter the code shown on the device that wants to sign in.</p>\n"
        if let problem { body += "<p class=\"problem\" role=\"alert\">\(HTML.escape(problem))</p>\n" }
        body += """
            <form method="get" action="/device">
            <label for="user_code">Code</label>
            <input type="text" class="code" id="user_code" name="user_code" value="\(HTML.escape(code))" autocomplete="off" autocapitalize="characters" spellcheck="false" placeholder="BCDF-GHJK" required maxlength="16">
            <button type="submit">Continue</button>
            </form>
            """
        return document(title: "Sign in on a device", body: body)
    }

    /// What is asking, as RFC 8628 §5.4 wants it shown: the client, where the request came from, and when.
    /// `purpose`: say what a link asks for (the confirmation page asks it in its own words).
    static func asking(_ authorization: DeviceAuthorization, purpose: Bool = true) -> String {
        let from = authorization.clientAddress.map { " on \(HTML.escape($0))" } ?? ""
        let link =
            purpose
            ? authorization.linkUser.map {
                "<p>It asks to link an account to the broker user <strong>\(HTML.escape($0.description))</strong>.</p>\n"
            } ?? "" : ""
        return """
            <p class="asking"><strong>broker CLI</strong>\(from), \(HTML.escape(shownTime(authorization.createdAt)))<br>
            <span class="muted">code <span class="code">\(HTML.escape(DeviceService.display(authorization.userCode)))</span></span></p>
            \(link)<p class="muted">Continue only if you started this yourself, on a device you use.</p>
            """
    }

    /// `2026-11-24 12:57 UTC`: when a request was made, as people read it.
    static func shownTime(_ seconds: Int64) -> String {
        let stamp = RFC3339.format(epochSeconds: seconds)  // 2026-11-24T12:57:42Z
        return String(stamp.prefix(10)) + " " + String(stamp.dropFirst(11).prefix(5)) + " UTC"
    }

    /// How to sign in for the device: each browser provider, or email and password.
    static func deviceChoice(
        authorization: DeviceAuthorization, csrf: String, providers: [(ProviderID, String)], password: Bool,
        email: String = "", problem: String? = nil, passkeys: Bool = false
    ) -> String {
        var body = asking(authorization)
        if let problem { body += "<p class=\"problem\" role=\"alert\">\(HTML.escape(problem))</p>\n" }
        let code = HTML.escape(authorization.userCode)
        for (id, name) in providers {
            let suggested = authorization.provider == id ? "" : " class=\"secondary\""
            body += """
                <form method="post" action="/auth/device/signin">
                <input type="hidden" name="user_code" value="\(code)">
                <input type="hidden" name="provider" value="\(HTML.escape(id.rawValue))">
                <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
                <button type="submit"\(authorization.provider == nil ? "" : suggested)>Sign in with \(HTML.escape(name))</button>
                </form>

                """
        }
        if password {
            if !providers.isEmpty { body += "<p class=\"or\">or with your email and password</p>\n" }
            body += """
                <form method="post" action="/auth/device/password">
                <input type="hidden" name="user_code" value="\(code)">
                <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
                <label for="email">Email</label>
                <input type="email" id="email" name="email" value="\(HTML.escape(email))" autocomplete="username" required>
                <label for="password">Password</label>
                <input type="password" id="password" name="password" autocomplete="current-password" required>
                <button type="submit">Sign in</button>
                </form>
                """
        }
        if passkeys {
            if !providers.isEmpty || password { body += "<p class=\"or\">or</p>\n" }
            body += passkeySignIn(
                action: "/auth/device/passkey", hidden: [("user_code", authorization.userCode), ("csrf", csrf)])
        }
        return document(title: authorization.linkUser == nil ? "Sign in on a device" : "Link an account", body: body)
    }

    /// On to the provider's sign-in page, at once (a refresh, no script), with a link if that is not followed.
    static func onward(to url: String, name: String) -> String {
        let escaped = HTML.escape(url)
        return document(
            title: "Signing in with \(name)…",
            body: """
                <meta http-equiv="refresh" content="0;url=\(escaped)">
                <p><a href="\(escaped)">Continue to \(HTML.escape(name))</a></p>
                """)
    }

    /// The last step: Allow or Deny, naming who signed in and what is asking.
    static func deviceConfirm(
        authorization: DeviceAuthorization, user: UserRecord, approval: String, csrf: String,
        linking identity: IdentityRecord? = nil, providerName: String? = nil
    ) -> String {
        let who =
            user.email.map { "\(HTML.escape($0)) (\(HTML.escape(user.id.description)))" }
            ?? HTML.escape(user.id.description)
        let hidden = """
            <input type="hidden" name="approval" value="\(HTML.escape(approval))">
            <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
            """
        let question: String
        if let identity {
            let account = HTML.escape(identity.email ?? identity.name ?? identity.subject)
            question = """
                <p>Link the \(HTML.escape(providerName ?? identity.provider.rawValue)) account <strong>\(account)</strong> to the broker
                user <strong>\(who)</strong>? From then on it signs in as that user.</p>
                """
        } else {
            question = "<p>Sign this device in as <strong>\(who)</strong>?</p>"
        }
        let body =
            asking(authorization, purpose: false) + question + """
                <form method="post" action="/auth/device/decision">
                \(hidden)
                <input type="hidden" name="decision" value="allow">
                <button type="submit">Allow</button>
                </form>
                <form method="post" action="/auth/device/decision">
                \(hidden)
                <input type="hidden" name="decision" value="deny">
                <button type="submit" class="danger">Deny</button>
                </form>
                """
        return document(title: identity == nil ? "Allow this device?" : "Link this account?", body: body)
    }

    /// The new-password form; `token` and `csrf` go back in hidden fields.
    /// - Parameters:
    ///   - otherWaysIn: the account's other ways in (provider names), shown so that whoever holds the address
    ///     sees whose account it is part of (RT2-5).
    ///   - separate: the address was added to that account and never confirmed: the new password makes an
    ///     account of its own instead.
    static func resetForm(
        token: String, csrf: String, email: String?, problem: String?, otherWaysIn: [String] = [],
        separate: Bool = false
    ) -> String {
        var body = ""
        if let email { body += "<p class=\"muted\">For \(HTML.escape(email))</p>\n" }
        if separate {
            body += """
                <p class="problem" role="alert">This address was added, unconfirmed, to a broker account that signs \
                in with \(list(otherWaysIn)). It is not yours to keep there: the password you choose here opens a \
                new account of your own with this address, and the other account loses it.</p>

                """
        } else if !otherWaysIn.isEmpty {
            body += "<p class=\"muted\">This account also signs in with \(list(otherWaysIn)).</p>\n"
        }
        if let problem { body += "<p class=\"problem\" role=\"alert\">\(HTML.escape(problem))</p>\n" }
        body += """
            <form method="post" action="/auth/password/reset">
            <input type="hidden" name="token" value="\(HTML.escape(token))">
            <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
            <label for="password">New password</label>
            <input type="password" id="password" name="password" autocomplete="new-password" required minlength="8">
            <label for="password_again">The same again</label>
            <input type="password" id="password_again" name="password_again" autocomplete="new-password" required>
            <button type="submit">Set the new password</button>
            </form>
            <p class="muted">Every session of this account will be signed out.</p>
            """
        return document(title: "Choose a new password", body: body)
    }
}
