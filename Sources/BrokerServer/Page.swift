import BrokerCore

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

    /// A whole document around `body` (trusted markup: callers escape what they put in).
    static func document(title: String, body: String) -> String {
        """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>\(HTML.escape(title))</title>
        <style>
        body { font-family: system-ui, sans-serif; line-height: 1.5; color: #1f2328; background: #f6f8fa; margin: 0; }
        main { max-width: 26rem; margin: 3rem auto; padding: 1.5rem; background: #fff; border: 1px solid #d0d7de; border-radius: 10px; }
        h1 { font-size: 1.35rem; margin-top: 0; }
        label { display: block; margin: .9rem 0 .3rem; font-weight: 600; }
        input[type=password] { width: 100%; box-sizing: border-box; padding: .6rem; font-size: 1rem; border: 1px solid #8c959f; border-radius: 6px; }
        button { margin-top: 1.2rem; width: 100%; padding: .7rem; font-size: 1rem; color: #fff; background: #1f6feb; border: 0; border-radius: 6px; }
        .problem { color: #a40e26; background: #ffebe9; border: 1px solid #ff8182; border-radius: 6px; padding: .6rem; }
        .muted { color: #59636e; font-size: .9rem; }
        @media (max-width: 30rem) { main { margin: 0; border: 0; border-radius: 0; min-height: 100vh; } }
        </style></head>
        <body><main>
        <h1>\(HTML.escape(title))</h1>
        \(body)
        </main></body></html>
        """
    }

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
    static func verifyForm(token: String, csrf: String, email: String?) -> String {
        var body = ""
        if let email { body += "<p>Confirm that <strong>\(HTML.escape(email))</strong> is your address.</p>\n" }
        body += """
            <form method="post" action="/auth/verify">
            <input type="hidden" name="token" value="\(HTML.escape(token))">
            <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
            <button type="submit">Confirm my address</button>
            </form>
            """
        return document(title: "Confirm your email address", body: body)
    }

    /// The new-password form; `token` and `csrf` go back in hidden fields.
    static func resetForm(token: String, csrf: String, email: String?, problem: String?) -> String {
        var body = ""
        if let email { body += "<p class=\"muted\">For \(HTML.escape(email))</p>\n" }
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
