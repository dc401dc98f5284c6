import BrokerConfiguration
import BrokerCore
import BrokerStore
import Logging

/// Password reset (a mailed single-use link to a broker page) and password change (signed in).
///
/// Enumeration: `POST /auth/password/forgot` answers the same body, status and time whether the address has an
/// account or not — the lookup, the link and the mail happen after the answer, in the background. Links are
/// 256-bit secrets stored as SHA-256, valid 30 minutes, once, and only the newest one per account.
final class PasswordService: ContextualService {
    let accounts: AccountService
    let grants: GrantService
    let mailer: Mailer?
    /// Reset requests per client address, and per email (known or not: the limit must not tell them apart). In
    /// the store: a fleet of brokers sends no more mail than one.
    let perAddress: SharedRateLimiter
    let perEmail: SharedRateLimiter

    static let resetLifetime: Int64 = 1800

    init(accounts: AccountService, grants: GrantService, mailer: Mailer?) {
        self.accounts = accounts
        self.grants = grants
        self.mailer = mailer
        perAddress = SharedRateLimiter(
            "password_reset_address", capacity: 10, per: 3600, store: accounts.store, clock: accounts.tokens.clock)
        perEmail = SharedRateLimiter(
            "password_reset_email", capacity: 3, per: 3600, store: accounts.store, clock: accounts.tokens.clock)
    }

    var context: ServiceContext { accounts.context }

    /// Whether passkeys are on (an account with passkeys only then recovers through the same form).
    var passkeysOn: Bool { tokens.passkeySettings.isOn }

    /// `POST /auth/password/forgot {"email"}` → 202, always the same.
    /// `GET /auth/password/forgot`: the form (linked from the sign-in page of apps).
    func forgotPage(secure: Bool) throws -> APIResponse {
        guard mailer != nil else {
            return Page.response(
                status: 404,
                Page.message(
                    title: "No password reset here", text: "This broker sends no mail, so it cannot reset passwords."))
        }
        return try FormGuard.page(secure: secure) { csrf in Page.forgotForm(csrf: csrf, passkeys: passkeysOn) }
    }

    /// The form of ``forgotPage(secure:)`` posted: the same work as the API, answered with a page.
    func forgotForm(_ input: RequestInput, cookie: String?, address: String?, secure: Bool) async throws
        -> APIResponse
    {
        guard FormGuard.accepts(cookie: cookie, field: (try? input.string("csrf")) ?? "") else {
            return Page.response(status: 403, Page.staleForm)
        }
        do {
            _ = try await forgot(input, address: address)
        } catch let error as APIError where error.status < 500 {
            return Page.response(status: error.status, Page.message(title: "Not sent", text: error.detail))
        }
        return FormGuard.clearing(
            Page.response(
                status: 200,
                Page.message(
                    title: "Check your mail",
                    text: "If an account uses this address, a link to choose a new password is on its way.")),
            secure: secure)
    }

    func forgot(_ input: RequestInput, address: String?) async throws -> APIResponse {
        guard let mailer else {
            throw APIError.notFound("password reset needs mail, and this broker has no mail section")
        }
        let email = AccountRules.lookupEmail(try input.string("email"))
        try await perAddress.admit(
            address.map(SourceAddress.network), metrics: metrics, limit: "password_reset",
            "too many reset requests; try later")
        try await perEmail.admit(
            email, metrics: metrics, limit: "password_reset",
            "too many reset requests for this address; try later")
        mailer.enqueue(.reset) { await self.resetMail(to: email, mailer: mailer) }
        return APIResponse(
            status: 202,
            body: [
                "status": "accepted",
                "message": "If an account uses this address, a link to choose a new password is on its way.",
            ],
            headers: [("Cache-Control", "no-store")])
    }

    /// The work behind `forgot`, after the answer: no message at all for an unknown address. An account with a
    /// password gets a reset link; one whose only ways in are passkeys, at the verified address it kept, a link
    /// to add a new passkey (``PasskeyService/recoverPage(query:)``).
    private func resetMail(to email: String, mailer: Mailer) async -> OutgoingMail? {
        do {
            guard let account = try await store.passwordAccount(email: email) else {
                guard passkeysOn, let user = try await store.passkeyRecoveryUser(email: email) else { return nil }
                let link = try await MailLink.create(
                    store: store, issuer: tokens.issuer, path: "/auth/passkey/recover", user: user.id,
                    purpose: EmailLinkPurpose.passkeyRecovery, lifetime: Self.resetLifetime, now: now)
                audit.record("account_recovery_requested", user: user.id, fields: ["provider": "passkey"])
                return mailer.compose(
                    .recover, to: email, name: Mailer.shownName(user.name, verified: true), link: link,
                    minutes: Self.resetLifetime / 60)
            }
            let link = try await MailLink.create(
                store: store, issuer: tokens.issuer, path: "/auth/password/reset", user: account.user.id,
                purpose: EmailLinkPurpose.reset, lifetime: Self.resetLifetime, now: now)
            audit.record("password_reset_requested", user: account.user.id)
            return mailer.compose(
                .reset, to: account.email,
                name: Mailer.shownName(account.user.name, verified: account.emailVerifiedAt != nil), link: link,
                minutes: Self.resetLifetime / 60)
        } catch {
            logger.error("password reset link not created", metadata: ["error": "\(error)"])
            return nil
        }
    }

    // MARK: The reset page

    /// `GET /auth/password/reset?token=…`: the form, or why the link no longer works.
    func resetPage(query: [String: String], secure: Bool) async throws -> APIResponse {
        guard let token = query["token"], let hash = MailLink.hash(token),
            let user = try await store.emailLinkUser(hash: hash, purpose: EmailLinkPurpose.reset, now: now)
        else {
            return Page.response(status: 400, Page.expiredLink)
        }
        let account = try await store.passwordAccount(user: user.id)
        let others = try await accounts.verification.otherWaysIn(user.id)
        var separate = false
        if let account { separate = try await accounts.isUnconfirmedAddition(account) }
        return try FormGuard.page(secure: secure) { csrf in
            Page.resetForm(
                token: token, csrf: csrf, email: account?.email ?? user.email, problem: nil, otherWaysIn: others,
                separate: separate)
        }
    }

    /// `POST /auth/password/reset` (the form): a new password under the registration rules; every session of
    /// the user ends.
    func reset(_ input: RequestInput, cookie: String?, secure: Bool) async throws -> APIResponse {
        let token = (try? input.string("token")) ?? ""
        let csrf = (try? input.string("csrf")) ?? ""
        guard FormGuard.accepts(cookie: cookie, field: csrf) else {
            audit.record("password_reset", outcome: "failure", fields: ["reason": "csrf"])
            return Page.response(status: 403, Page.staleForm)
        }
        guard let hash = MailLink.hash(token),
            let user = try await store.emailLinkUser(hash: hash, purpose: EmailLinkPurpose.reset, now: now),
            let account = try await store.passwordAccount(user: user.id)
        else {
            return Page.response(status: 400, Page.expiredLink)
        }
        let password = (try? input.string("password")) ?? ""
        let again = (try? input.string("password_again")) ?? ""
        var problem: String?
        if password != again {
            problem = "The two passwords are not the same."
        } else if let rule = AccountRules.passwordProblem(password, email: account.email) {
            problem = rule.message
        }
        if let problem {
            return Page.response(
                status: 400, Page.resetForm(token: token, csrf: csrf, email: account.email, problem: problem))
        }
        let fresh = try await accounts.hashPassword(Secret(password))
        if try await accounts.isUnconfirmedAddition(account) {
            return try await separateAccount(for: account, passwordHash: fresh, secure: secure)
        }
        guard let reset = try await store.resetPassword(linkHash: hash, passwordHash: fresh, now: now) else {
            return Page.response(status: 400, Page.expiredLink)
        }
        metrics.passwordEvent("reset")
        audit.record("password_reset", user: reset)
        logger.info("password reset", metadata: ["broker.user": "\(reset)"])
        return FormGuard.clearing(
            Page.response(
                status: 200,
                Page.message(
                    title: "Your password was changed",
                    text: "Every session of this account was signed out. Sign in again with the new password.")),
            secure: secure)
    }

    /// RT2-5: the reset link of an address added to an account with other ways in, never confirmed. Its
    /// owner — the link came to their mailbox — gets an account of their own with it, confirmed; the account it
    /// was added to loses it (with its unused links, this one included). Before, the reset made them a way
    /// into the account of whoever had added their address.
    private func separateAccount(for account: PasswordAccount, passwordHash: String, secure: Bool) async throws
        -> APIResponse
    {
        guard try await store.releaseUnverifiedAddress(email: account.email, now: now) != nil else {
            return Page.response(status: 400, Page.expiredLink)
        }
        audit.record(
            "unconfirmed_address_released", user: account.user.id, fields: ["reason": "reset_by_owner"])
        let user = AccountService.newCustomUser(email: account.email, name: nil, now: now)
        do {
            try await store.createPasswordAccount(
                user: user, email: account.email, passwordHash: passwordHash, verifiedAt: now)
        } catch let error as StoreError where error.code == .conflict {
            return Page.response(status: 409, Page.expiredLink)
        }
        metrics.passwordEvent("reset")
        audit.record("registration", user: user.id, fields: ["provider": "custom", "flow": "reset"])
        logger.info("address taken back by its owner", metadata: ["broker.user": "\(user.id)"])
        return FormGuard.clearing(
            Page.response(
                status: 200,
                Page.message(
                    title: "Your account is ready",
                    text: "The address is yours and confirmed, in an account of its own: sign in with it and the new "
                        + "password. The account it had been added to no longer has it.")),
            secure: secure)
    }

    // MARK: Change (signed in)

    /// `POST /auth/password/change {"current_password", "new_password"}` with the session's bearer token:
    /// the other sessions end, this one stays.
    func change(_ input: RequestInput, authorization: String?, address: String? = nil) async throws -> APIResponse {
        let view = try await grants.tokens.authenticateAccount(authorization: authorization)
        let (session, user) = (view.session, view.user)
        try await StepUp.requireStrongest(view, authorization: authorization, store: store, now: now)
        guard let account = try await store.passwordAccount(user: user.id) else {
            throw APIError.invalidRequest(
                "this account signs in through \(user.id.provider.rawValue) and has no password")
        }
        let current = Secret(try input.string("current_password"))
        let next = try input.string("new_password")
        guard try await accounts.verifyCurrentPassword(current, of: account, address: address) else {
            audit.record(
                "password_changed", outcome: "failure", user: user.id, fields: ["reason": "wrong_password"])
            throw APIError.invalidCredentials
        }
        if let problem = AccountRules.passwordProblem(next, email: account.email) {
            throw APIError.invalidRequest(problem.message)
        }
        let fresh = try await accounts.hashPassword(Secret(next))
        guard
            try await store.changePassword(
                user: user.id, from: account.passwordHash, to: fresh, keepingSession: session.id, now: now)
        else {
            throw APIError.conflict("the password was changed at the same time; sign in again and retry")
        }
        metrics.passwordEvent("change")
        audit.record("password_changed", user: user.id)
        return APIResponse(status: 200, body: ["status": "changed"], headers: [("Cache-Control", "no-store")])
    }
}
