import BrokerConfiguration
import BrokerCore
import BrokerStore
import Logging
import ProviderSupport

/// Address verification for custom accounts: registering mails a single-use link (24 hours, stored hashed);
/// the link opens a page whose button confirms the address (a GET never spends the link, so a mail scanner
/// that fetches links cannot use it up). Tokens carry `email_verified`; with `server.require_verified_email`,
/// login refuses unverified accounts and registration starts no session.
final class VerificationService: ContextualService {
    let context: ServiceContext
    let mailer: Mailer?
    /// Resend requests per address and per client address (unknown addresses count alike), in the store.
    let perEmail: SharedRateLimiter
    let perAddress: SharedRateLimiter
    /// Notes to the owner of an address someone registered again (`server.enumeration_protection`).
    let existsNotes: SharedRateLimiter

    static let lifetime: Int64 = 86_400

    init(
        context: ServiceContext, mailer: Mailer?
    ) {
        self.context = context
        self.mailer = mailer
        perEmail = SharedRateLimiter(
            "verification_email", capacity: 3, per: 3600, store: context.store, clock: context.tokens.clock)
        perAddress = SharedRateLimiter(
            "verification_address", capacity: 10, per: 3600, store: context.store, clock: context.tokens.clock)
        existsNotes = SharedRateLimiter(
            "exists_note", capacity: 3, per: 3600, store: context.store, clock: context.tokens.clock)
    }

    var required: Bool { tokens.configuration.requireVerifiedEmail }

    /// After a registration: the link goes out in the background (nothing without mail).
    func registered(_ user: UserRecord, email: String) {
        guard let mailer else { return }
        mailer.enqueue(.verify) { await self.verifyMail(to: email, user: user, mailer: mailer) }
    }

    /// After a registration for an address that has an account (`server.enumeration_protection`): its owner is
    /// told, with a reset link, at most three times an hour; nothing changes on the account.
    func alreadyRegistered(email: String) {
        guard let mailer else { return }
        // Everything, the limit included, happens in the background: the answer takes no longer for an address
        // that has an account than for one that has none.
        mailer.enqueue(.exists) {
            do {
                guard try await self.existsNotes.take(email) == nil,
                    let account = try await self.store.passwordAccount(email: email)
                else { return nil }
                let link = try await MailLink.create(
                    store: self.store, issuer: self.tokens.issuer, path: "/auth/password/reset",
                    user: account.user.id, purpose: EmailLinkPurpose.reset, lifetime: Self.existsLinkLifetime,
                    now: self.now)
                return mailer.compose(
                    .exists, to: account.email,
                    name: Mailer.shownName(account.user.name, verified: account.emailVerifiedAt != nil), link: link,
                    minutes: Self.existsLinkLifetime / 60)
            } catch {
                self.logger.error("reset link for a repeated registration not created", metadata: ["error": "\(error)"])
                return nil
            }
        }
    }

    /// The reset link in that note lives as long as one asked for (`PasswordService.resetLifetime`).
    static let existsLinkLifetime: Int64 = 1800

    /// `POST /auth/verify/resend {"email"}` → 202, the same for every address.
    func resend(_ input: RequestInput, address: String?) async throws -> APIResponse {
        guard let mailer else {
            throw APIError.notFound("address verification needs mail, and this broker has no mail section")
        }
        let email = AccountRules.lookupEmail(try input.string("email"))
        try await perAddress.admit(
            address.map(SourceAddress.network), metrics: metrics, limit: "verification", "too many requests; try later")
        try await perEmail.admit(email, metrics: metrics, limit: "verification", "too many requests; try later")
        mailer.enqueue(.verify) {
            guard let account = try? await self.store.passwordAccount(email: email), account.emailVerifiedAt == nil
            else { return nil }
            return await self.verifyMail(to: account.email, user: account.user, mailer: mailer)
        }
        return APIResponse(
            status: 202,
            body: [
                "status": "accepted",
                "message": "If an unconfirmed account uses this address, a new confirmation link is on its way.",
            ],
            headers: [("Cache-Control", "no-store")])
    }

    private func verifyMail(to email: String, user: UserRecord, mailer: Mailer) async -> OutgoingMail? {
        do {
            let link = try await MailLink.create(
                store: store, issuer: tokens.issuer, path: "/auth/verify", user: user.id,
                purpose: EmailLinkPurpose.verify, lifetime: Self.lifetime, now: now)
            // Sent only to addresses not yet confirmed: never with the registrant's name.
            return mailer.compose(
                .verify, to: email, name: Mailer.shownName(user.name, verified: false), link: link,
                minutes: Self.lifetime / 60)
        } catch {
            logger.error("verification link not created", metadata: ["error": "\(error)"])
            return nil
        }
    }

    /// The ways into `user` other than a password, as people know them (provider display names), for the
    /// pages a mailed link opens (RT2-5): whoever holds the address sees whose account it is part of.
    func otherWaysIn(_ user: UserID) async throws -> [String] {
        try await store.identities(user: user).map { displayName($0.identity.provider) }
    }

    /// `GET /auth/verify?token=…`: a page with one button; the link is not spent yet.
    func page(query: [String: String], secure: Bool) async throws -> APIResponse {
        guard let token = query["token"], let hash = MailLink.hash(token),
            let user = try await store.emailLinkUser(hash: hash, purpose: EmailLinkPurpose.verify, now: now)
        else {
            return Page.response(status: 400, Page.expiredVerification)
        }
        let account = try await store.passwordAccount(user: user.id)
        let others = try await otherWaysIn(user.id)
        return try FormGuard.page(secure: secure) { csrf in
            Page.verifyForm(token: token, csrf: csrf, email: account?.email ?? user.email, otherWaysIn: others)
        }
    }

    /// `POST /auth/verify` (the page's button): the address is confirmed, once.
    func confirm(_ input: RequestInput, cookie: String?, secure: Bool) async throws -> APIResponse {
        let token = (try? input.string("token")) ?? ""
        let csrf = (try? input.string("csrf")) ?? ""
        guard FormGuard.accepts(cookie: cookie, field: csrf) else {
            return Page.response(status: 403, Page.staleForm)
        }
        guard let hash = MailLink.hash(token),
            let user = try await store.verifyEmail(linkHash: hash, now: now)
        else {
            return Page.response(status: 400, Page.expiredVerification)
        }
        audit.record("email_verified", user: user)
        logger.info("address verified", metadata: ["broker.user": "\(user)"])
        return FormGuard.clearing(
            Page.response(
                status: 200,
                Page.message(
                    title: "Your address is confirmed", text: "Thank you. You can close this page and sign in.")),
            secure: secure)
    }
}
