import BrokerCore
import BrokerStore

/// The broker's own web pages (password reset): server-rendered HTML with no script and no external asset,
/// every value escaped, readable at a phone's width; sent with a strict Content-Security-Policy, no framing,
/// no caching and no referrer (the page's URL carries a secret).
package enum Page {
    package static let headers: [(String, String)] = [
        ("Content-Type", "text/html; charset=utf-8"),
        (
            "Content-Security-Policy",
            "default-src 'none'; img-src data:; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; "
                + "base-uri 'none'"
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

    /// An app sign-in's provider step came back to a browser that did not start it (RT3-2).
    static let appOtherBrowser = message(
        title: "Finish in the browser where you started",
        text:
            "This sign-in was started in another browser. If a link brought you here, you were not signed in: go "
            + "back to the app you want to use and sign in from there."
    )

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
