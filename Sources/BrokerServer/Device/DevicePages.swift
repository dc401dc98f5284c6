import BrokerCore
import BrokerStore

/// The device flow's pages (`/device`): the code, the choice of a way to sign in, Allow or Deny.
extension Page {
    static let deviceGone = message(
        title: "This sign-in is no longer waiting",
        text:
            "The code expired, was used, or was denied. Start again on the device (broker login --device) and enter the new code."
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
        email: String = "", problem: String? = nil, passkeys: Bool = false, icons: [ProviderID: String] = [:]
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
                <button type="submit"\(authorization.provider == nil ? "" : suggested)>\(ProviderIcon.tag(icons[id]))Sign in with \(HTML.escape(name))</button>
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
}
