import BrokerCore
import BrokerStore
import Logging

/// Recovery without a back door, for an account whose authenticator app and recovery codes are both lost: a
/// single-use link mailed to the account's **confirmed** address, whose page then asks for the **password**;
/// both together remove the second factor and sign out every session. Neither the mailbox alone nor the password
/// alone does.
///
/// Enumeration: `POST /auth/mfa/recover` answers the same body, status and time whatever the address — the lookup
/// and the mail happen after the answer. Links are 256-bit secrets stored as SHA-256, 30 minutes, once, only the
/// newest per account; opening one spends nothing (a mail scanner may fetch it); the password guess goes through
/// the login throttle.
final class SecondFactorRecovery: ContextualService {
    let accounts: AccountService
    var secondFactors: SecondFactorService { accounts.secondFactors }
    var mailer: Mailer? { secondFactors.mailer }
    var context: ServiceContext { accounts.context }
    /// Recovery mails asked for, per client network and per address (known or not). In the store: a fleet of
    /// brokers sends no more than one.
    let perAddress: SharedRateLimiter
    let perEmail: SharedRateLimiter

    static let lifetime: Int64 = 1800
    static let path = "/auth/mfa/recover"

    init(accounts: AccountService) {
        self.accounts = accounts
        perAddress = SharedRateLimiter(
            "mfa_recovery_address", capacity: 10, per: 3600, store: accounts.store, clock: accounts.tokens.clock)
        perEmail = SharedRateLimiter(
            "mfa_recovery_email", capacity: 3, per: 3600, store: accounts.store, clock: accounts.tokens.clock)
    }

    static let notAvailable = Page.message(
        title: "No recovery by mail here",
        text: "This broker sends no mail. Sign in with a recovery code, or ask the broker's operator.")

    static let expired = Page.message(
        title: "This link no longer works",
        text: "Recovery links work once, for 30 minutes, and only the newest one. Ask for a new link and use it soon.")

    // MARK: Asking for the link

    /// `GET /auth/mfa/recover` without a token: the form that asks for the link (linked from the code step of the
    /// sign-in pages); with `?token=…`, the link's password form.
    func page(query: [String: String]) async throws -> APIResponse {
        guard mailer != nil else { return Page.response(status: 404, Self.notAvailable) }
        if let token = query["token"] { return try await passwordPage(token: token, problem: nil) }
        return try FormGuard.page(secure: secure) { csrf in Page.secondFactorRecoveryRequest(csrf: csrf) }
    }

    /// `POST /auth/mfa/recover {"email"}` → 202, always the same; the form of ``page(query:)`` (it carries a CSRF
    /// token) gets a page.
    func request(_ input: RequestInput, cookie: String?, address: String?) async throws -> APIResponse {
        let fromForm = (try? input.optionalString("csrf")) != nil
        if fromForm {
            guard FormGuard.accepts(cookie: cookie, field: (try? input.string("csrf")) ?? "") else {
                return Page.response(status: 403, Page.staleForm)
            }
        }
        guard let mailer else {
            if fromForm { return Page.response(status: 404, Self.notAvailable) }
            throw APIError.notFound("recovery by mail needs mail, and this broker has no mail section")
        }
        let email = AccountRules.lookupEmail(try input.string("email"))
        do {
            try await perAddress.admit(
                address.map(SourceAddress.network), metrics: metrics, limit: "mfa_recovery",
                "too many recovery requests; try later")
            try await perEmail.admit(
                email, metrics: metrics, limit: "mfa_recovery", "too many recovery requests for this address; try later"
            )
        } catch let error as APIError where fromForm {
            return Page.response(status: error.status, Page.message(title: "Not sent", text: error.detail))
        }
        mailer.enqueue(.secondFactorRecovery) { await self.recoveryMail(to: email, mailer: mailer) }
        let said = "If an account with a second factor uses this confirmed address, a link is on its way."
        if fromForm {
            return FormGuard.clearing(
                Page.response(status: 200, Page.message(title: "Check your mail", text: said)), secure: secure)
        }
        return APIResponse(
            status: 202, body: ["status": "accepted", "message": .string(said)],
            headers: [("Cache-Control", "no-store")])
    }

    /// The work behind ``request(_:cookie:address:)``, after the answer: a link only for an account that has a
    /// second factor and a confirmed address; nothing at all otherwise.
    private func recoveryMail(to email: String, mailer: Mailer) async -> OutgoingMail? {
        do {
            guard let account = try await store.passwordAccount(email: email), account.emailVerifiedAt != nil,
                try await store.totpFactor(user: account.user.id) != nil
            else { return nil }
            let link = try await MailLink.create(
                store: store, issuer: issuer, path: Self.path, user: account.user.id,
                purpose: EmailLinkPurpose.secondFactorRecovery, lifetime: Self.lifetime, now: now)
            audit.record("second_factor_recovery_requested", user: account.user.id)
            return mailer.compose(
                .secondFactorRecovery, to: account.email, name: Mailer.shownName(account.user.name, verified: true),
                link: link, minutes: Self.lifetime / 60)
        } catch {
            logger.error("second-factor recovery link not created", metadata: ["error": "\(error)"])
            return nil
        }
    }

    // MARK: Following the link

    private func passwordPage(token: String, problem: String?, status: Int = 200) async throws -> APIResponse {
        guard let hash = MailLink.hash(token),
            let user = try await store.emailLinkUser(
                hash: hash, purpose: EmailLinkPurpose.secondFactorRecovery, now: now),
            let account = try await store.passwordAccount(user: user.id)
        else { return Page.response(status: 400, Self.expired) }
        var response = try FormGuard.page(secure: secure) { csrf in
            Page.secondFactorRecoveryPassword(token: token, csrf: csrf, email: account.email, problem: problem)
        }
        response.status = status
        return response
    }

    /// `POST /auth/mfa/recover/confirm {token, csrf, password}` (the link's form): the password right, the factor
    /// and its recovery codes go and every session ends, in one transaction that spends the link.
    func confirm(_ input: RequestInput, cookie: String?, address: String?) async throws -> APIResponse {
        let token = (try? input.string("token")) ?? ""
        guard FormGuard.accepts(cookie: cookie, field: (try? input.string("csrf")) ?? "") else {
            audit.record("second_factor_removed", outcome: "failure", fields: ["reason": "csrf", "via": "mail"])
            return Page.response(status: 403, Page.staleForm)
        }
        guard let hash = MailLink.hash(token),
            let user = try await store.emailLinkUser(
                hash: hash, purpose: EmailLinkPurpose.secondFactorRecovery, now: now),
            let account = try await store.passwordAccount(user: user.id)
        else { return Page.response(status: 400, Self.expired) }
        let password = Secret((try? input.string("password")) ?? "")
        let right: Bool
        do {
            right = try await accounts.verifyCurrentPassword(password, of: account, address: address)
        } catch let error as APIError where error.status == 429 {
            return Page.response(status: 429, Page.message(title: "Too many attempts", text: error.detail))
        }
        guard right else {
            audit.record(
                "second_factor_removed", outcome: "failure", user: user.id,
                fields: ["reason": "wrong_password", "via": "mail"])
            // The same form again (a fresh CSRF pair), the link unspent.
            return try await passwordPage(token: token, problem: "That is not the account's password.", status: 401)
        }
        guard let removed = try await store.removeTOTPFactor(linkHash: hash, now: now) else {
            return Page.response(status: 400, Self.expired)
        }
        audit.record("second_factor_removed", user: removed, fields: ["method": "totp", "via": "mail"])
        logger.info("second factor removed through the mailed link", metadata: ["broker.user": "\(removed)"])
        await secondFactors.notify(
            removed,
            change: "Its second factor and recovery codes were removed through the mailed recovery link, with the "
                + "password; every session was signed out.")
        return FormGuard.clearing(
            Page.response(
                status: 200,
                Page.message(
                    title: "The second factor was removed",
                    text: "Every session of this account was signed out. Sign in with your password, and add an "
                        + "authenticator app again (broker mfa totp add).")),
            secure: secure)
    }
}

extension Page {
    /// The form that asks for a recovery link.
    static func secondFactorRecoveryRequest(csrf: String) -> String {
        document(
            title: "Lost your authenticator app?",
            body: """
                <p>If your authenticator app and your recovery codes are both lost, broker can mail a link to your \
                account's confirmed address. The link asks for your password, then removes the second factor.</p>
                <form method="post" action="/auth/mfa/recover">
                <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
                <label for="email">Email</label>
                <input type="email" id="email" name="email" autocomplete="username" required>
                <button type="submit">Mail me a link</button>
                </form>
                """)
    }

    /// The link's page: the password, then the factor goes.
    static func secondFactorRecoveryPassword(token: String, csrf: String, email: String, problem: String?) -> String {
        var body = "<p class=\"muted\">For \(HTML.escape(email))</p>\n"
        if let problem { body += "<p class=\"problem\" role=\"alert\">\(HTML.escape(problem))</p>\n" }
        body += """
            <form method="post" action="/auth/mfa/recover/confirm">
            <input type="hidden" name="token" value="\(HTML.escape(token))">
            <input type="hidden" name="csrf" value="\(HTML.escape(csrf))">
            <label for="password">Password</label>
            <input type="password" id="password" name="password" autocomplete="current-password" required>
            <button type="submit">Remove the second factor</button>
            </form>
            <p class="muted">Every session of this account will be signed out. Add an authenticator app again \
            afterwards.</p>
            """
        return document(title: "Remove your second factor", body: body)
    }
}
