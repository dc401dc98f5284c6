import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Custom accounts: `POST /auth/register` and `POST /auth/login` (scrypt in a bounded pool, the login
/// throttle, rehash on login).
final class AccountService: ContextualService {
    let context: ServiceContext
    let hasher: PasswordHasher
    let pool: HashingPool
    let throttle: LoginThrottle?
    /// The accounts' second factors: asked after the password wherever one is given.
    let secondFactors: SecondFactorService
    /// Mails the confirmation link after a registration; decides whether unverified accounts may sign in.
    let verification: VerificationService
    /// New accounts per client address (`server.registrations_per_hour`, at once and per hour).
    let registrations: RateLimiter
    /// A hash of a random password, verified against for unknown emails so that they cost the same time.
    let dummyHash: String

    init(
        context: ServiceContext, hasher: PasswordHasher, pool: HashingPool,
        throttle: LoginThrottle?, verification: VerificationService, secondFactors: SecondFactorService
    ) throws {
        self.context = context
        self.secondFactors = secondFactors
        self.verification = verification
        self.hasher = hasher
        self.pool = pool
        self.throttle = throttle
        registrations = RateLimiter(
            capacity: context.tokens.configuration.registrationsPerHour, per: 3600, clock: context.tokens.clock)
        dummyHash = try hasher.hash(Secret(try SecureRandom.token(byteCount: 16)))
    }

    /// `POST /auth/register`: a custom account, then a session (201). Limited per client address, so that the
    /// 409 for a taken email cannot be used to list accounts at speed, nor registration to fill the store.
    /// - Parameter startSession: `false` for the sign-in page of an app, which starts a browser session of its own
    ///   (the answer is then the 201 without tokens, with `user_id`).
    func register(_ input: RequestInput, address: String? = nil, startSession: Bool = true) async throws
        -> APIResponse
    {
        do {
            return try await countedRegistration(input, address: address, startSession: startSession)
        } catch let concealed as ConcealedFailure {
            return concealed.response
        }
    }

    private func countedRegistration(_ input: RequestInput, address: String?, startSession: Bool) async throws
        -> APIResponse
    {
        try await metrics.counting(
            success: "created",
            { outcome in
                metrics.registration(outcome: outcome)
                if outcome != "created" {
                    audit.record("registration", outcome: "failure", fields: ["reason": outcome])
                }
            }
        ) {
            try await createAccount(input, address: address, startSession: startSession)
        }
    }

    private func createAccount(_ input: RequestInput, address: String?, startSession: Bool) async throws
        -> APIResponse
    {
        try registrations.admit(
            address.map(SourceAddress.network), metrics: metrics, limit: "registrations",
            "too many registrations from this address; try again later")
        let (email, password) = try Self.newCredentials(input)
        var name: String?
        if let raw = try input.optionalString("name") {
            switch AccountRules.displayName(raw) {
            case .success(let value): name = value
            case .failure(let violation): throw APIError.invalidRequest(violation.message)
            }
        }
        if tokens.configuration.enumerationProtection {
            return try await concealedRegistration(
                email: email, password: Secret(password), name: name, address: address)
        }
        // Cheap check first, so that a taken email costs no hash; the unique index still decides races. An
        // address added to someone's account and never confirmed does not count as taken (RT2-5).
        if let held = try await store.passwordAccount(email: email), try await !isUnconfirmedAddition(held) {
            throw APIError.accountExists
        }
        let secret = Secret(password)
        let hash: String
        do {
            hash = try await hashPassword(secret)
        } catch {
            // A full hashing pool served nothing: the attempt does not count against the address.
            if let address { registrations.giveBack(address) }
            throw error
        }
        let user = UserRecord(
            id: UserID(provider: .custom, subject: UUID().uuidString.lowercased()),
            email: email,
            name: name,
            createdAt: now
        )
        _ = try await releaseIfUnconfirmedAddition(email: email)
        do {
            try await store.createPasswordAccount(user: user, email: email, passwordHash: hash)
        } catch let error as StoreError where error.code == .conflict {
            throw APIError.accountExists
        }
        logger.info("account created", metadata: ["broker.user": "\(user.id)"])
        audit.record("registration", user: user.id, fields: ["provider": "custom"])
        verification.registered(user, email: email)
        if verification.required || !startSession || configuration.requireMFA {
            // No session until the address is confirmed: a token now would be a sign-in without it. Nor, under
            // `server.require_mfa`, before a second factor is added.
            var body: [String: JSONValue] = [
                "user_id": .string(user.id.description), "provider": "custom", "email_verified": false,
            ]
            if verification.mailer != nil { body["verification"] = "sent" }
            if configuration.requireMFA { body["mfa"] = "required" }
            return APIResponse(status: 201, body: .object(body), headers: [("Cache-Control", "no-store")])
        }
        // Just created: its address is not confirmed yet.
        var body = try await tokens.startSession(
            user: user, clientID: TokenIssuer.cliClientID, scope: nil, signedInWith: .custom, emailVerified: false)
        if verification.mailer != nil, case .object(var fields) = body {
            fields["verification"] = "sent"
            body = .object(fields)
        }
        return .tokens(body, status: 201)
    }

    /// The `email` (normalised) and `password` of a new way to sign in, under the registration rules; 400
    /// `invalid_request` saying which rule a value breaks.
    static func newCredentials(_ input: RequestInput) throws -> (email: String, password: String) {
        let email: String
        switch AccountRules.normalizedEmail(try input.string("email")) {
        case .success(let value): email = value
        case .failure(let violation): throw APIError.invalidRequest(violation.message)
        }
        let password = try input.string("password")
        if let problem = AccountRules.passwordProblem(password, email: email) {
            throw APIError.invalidRequest(problem.message)
        }
        return (email, password)
    }

    /// The answer to every well-formed registration under `server.enumeration_protection`.
    static let concealedAnswer = APIResponse(
        status: 202,
        body: [
            "status": "accepted",
            "message": .string(
                "Check your mail: a link to confirm the new account, or, if the address has an account already, "
                    + "how to sign in."),
        ],
        headers: [("Cache-Control", "no-store")])

    /// Registration that does not tell whether the address has an account: the same work (the password is
    /// hashed either way), the same answer (202, no session), and the difference only in the mail the address's
    /// owner receives — a confirmation link, or a note with a reset link.
    private func concealedRegistration(email: String, password: Secret, name: String?, address: String?) async throws
        -> APIResponse
    {
        let hash: String
        do {
            hash = try await hashPassword(password)
        } catch {
            if let address { registrations.giveBack(address) }
            throw error
        }
        _ = try await releaseIfUnconfirmedAddition(email: email)
        if try await store.passwordAccount(email: email) == nil {
            let user = UserRecord(
                id: UserID(provider: .custom, subject: UUID().uuidString.lowercased()), email: email, name: name,
                createdAt: now)
            do {
                try await store.createPasswordAccount(user: user, email: email, passwordHash: hash)
                logger.info("account created", metadata: ["broker.user": "\(user.id)"])
                audit.record("registration", user: user.id, fields: ["provider": "custom"])
                verification.registered(user, email: email)
                return Self.concealedAnswer
            } catch let error as StoreError where error.code == .conflict {
                // Registered a moment ago by someone else: as if it had been there.
            }
        }
        verification.alreadyRegistered(email: email)
        throw ConcealedFailure(reason: "account_exists", response: Self.concealedAnswer)
    }

    /// A new custom account's user: a random id (never made from the address).
    static func newCustomUser(email: String, name: String?, now: Int64) -> UserRecord {
        UserRecord(
            id: UserID(provider: .custom, subject: UUID().uuidString.lowercased()), email: email, name: name,
            createdAt: now)
    }

    // MARK: Unconfirmed addresses (attack review RT2-5)

    /// Whether `account` is an address added to a user who has other ways in, and never confirmed. Such an
    /// address reserves nothing and is no way in: before, whoever added someone else's address to their own
    /// user (`broker link custom`) got that person's login into it once they reset "their" password.
    ///
    /// Only on a broker that can confirm addresses (a `mail` section): without mail nothing can ever be
    /// confirmed, there is no reset to abuse either, and an address is a user name, first come first served.
    func isUnconfirmedAddition(_ account: PasswordAccount) async throws -> Bool {
        guard verification.mailer != nil, account.emailVerifiedAt == nil else { return false }
        return try await !store.identities(user: account.user.id).isEmpty
    }

    /// Frees `email` when it is an unconfirmed addition (``isUnconfirmedAddition(_:)``) so that a registration,
    /// a link or a reset can take it; `true` when it was freed.
    func releaseIfUnconfirmedAddition(email: String) async throws -> Bool {
        guard let held = try await store.passwordAccount(email: email), try await isUnconfirmedAddition(held),
            let released = try await store.releaseUnverifiedAddress(email: email, now: now)
        else { return false }
        audit.record(
            "unconfirmed_address_released", user: released.user,
            fields: ["reason": "claimed_elsewhere", "user_deleted": released.userDeleted ? "true" : "false"])
        logger.info("unconfirmed address released", metadata: ["broker.user": "\(released.user)"])
        return true
    }

    /// `POST /auth/login`: email + password → session; one answer for every failure.
    func login(_ input: RequestInput, address: String?) async throws -> APIResponse {
        try await metrics.counting(
            success: "success",
            { outcome in
                metrics.signIn(provider: "custom", outcome: outcome)
                if outcome != "success" {
                    audit.record("sign_in", outcome: "failure", fields: ["provider": "custom", "reason": outcome])
                }
            }
        ) {
            try await passwordLogin(input, address: address)
        }
    }

    /// The password, then — for an account with a second factor — its code (`otp`: six digits, or a recovery
    /// code). Without `otp` such an account is answered 401 `mfa_required` (said only to whoever knew the
    /// password), and the client asks again with both; under `server.require_mfa` an account without one is
    /// answered 403 `mfa_enrollment_required`.
    private func passwordLogin(_ input: RequestInput, address: String?) async throws -> APIResponse {
        let account = try await authenticate(
            email: try input.string("email"), password: Secret(try input.string("password")), address: address)
        let way = try await secondFactor(of: account, code: try input.optionalString("otp"), address: address)
        let response = APIResponse.tokens(
            try await tokens.startSession(
                user: account.user, clientID: TokenIssuer.cliClientID, scope: nil, signedInWith: way,
                emailVerified: TokenIssuer.emailVerified(account)))
        audit.record("sign_in", user: account.user.id, fields: ["provider": "custom", "method": way.rawValue])
        return response
    }

    /// The way a password sign-in of `account` ends: ``ProviderID/customOTP`` when its second factor's `code`
    /// is good, ``ProviderID/custom`` when it has none (and none is required); else the refusal.
    func secondFactor(of account: PasswordAccount, code: String?, address: String?) async throws -> ProviderID {
        guard try await secondFactors.factor(of: account.user.id) != nil else {
            guard !configuration.requireMFA else {
                audit.record(
                    "sign_in", outcome: "failure", user: account.user.id,
                    fields: ["provider": "custom", "reason": "mfa_enrollment_required"])
                throw APIError.mfaEnrollmentRequired
            }
            return .custom
        }
        guard let code, !code.isEmpty else { throw APIError.mfaRequired }
        guard try await secondFactors.check(code, user: account.user.id, address: address) != nil else {
            audit.record(
                "sign_in", outcome: "failure", user: account.user.id,
                fields: ["provider": "custom", "reason": "wrong_code"])
            throw APIError(
                status: 401, code: .invalidCredentials,
                detail: "wrong or already used code: type the code the authenticator app shows now, or a recovery code")
        }
        return .customOTP
    }

    /// The password account an email and password sign in to, under the login throttle and the verification
    /// rule; one answer (``APIError/invalidCredentials``) for every wrong pair. Also the device flow's custom
    /// sign-in. The account is the one read for the check (the session needs no second read).
    func authenticate(email rawEmail: String, password: Secret, address: String?) async throws -> PasswordAccount {
        let email = AccountRules.lookupEmail(rawEmail)
        // Admitted and counted before any hashing: a burst of parallel guesses cannot outrun the count.
        let admission = try await admitGuess(
            account: email, address: address, blocked: "too many failed sign-ins; try again later",
            busy: "the server is busy with sign-ins to this account; retry shortly")
        let account: PasswordAccount?
        do {
            account = try await store.passwordAccount(email: email)
        } catch {
            try? await throttle?.refund(account: email, address: address, admission: admission)
            throw error
        }
        let stored = account?.passwordHash ?? dummyHash
        let verified: Bool
        do {
            verified = try await verifyPassword(password, against: stored)
        } catch let error as PasswordHasher.VerifyError {
            // Best effort: a reservation that cannot be given back lapses after a minute.
            try? await throttle?.refund(account: email, address: address, admission: admission)
            // A corrupt or hostile row: refused before any memory is spent on it.
            logger.error(
                "stored password hash cannot be used",
                metadata: ["broker.user": "\(account?.user.id.description ?? "-")", "error": "\(error)"]
            )
            throw APIError.serverError
        } catch {
            // The pool was full: no verdict, so the attempt does not count.
            // Best effort: a reservation that cannot be given back lapses after a minute.
            try? await throttle?.refund(account: email, address: address, admission: admission)
            throw error
        }
        guard verified, let account else {
            try await throttle?.settle(account: email, address: address, admission: admission, succeeded: false)
            logger.info("login refused", metadata: ["broker.address": "\(address ?? "-")"])
            throw APIError.invalidCredentials
        }
        try await throttle?.settle(account: email, address: address, admission: admission, succeeded: true)
        // Said only to whoever knows the password: the refusal reveals nothing to a guesser.
        if verification.required && account.emailVerifiedAt == nil {
            audit.record(
                "sign_in", outcome: "failure", user: account.user.id,
                fields: ["provider": "custom", "reason": "email_not_verified"])
            throw APIError(
                status: 403, code: .emailNotVerified,
                detail: "confirm your email address first: follow the link we mailed, or ask for a new one "
                    + "(broker register --resend --email ADDRESS)")
        }
        // An address added to an account with other ways in is one itself only once confirmed (RT2-5).
        if try await isUnconfirmedAddition(account) {
            audit.record(
                "sign_in", outcome: "failure", user: account.user.id,
                fields: ["provider": "custom", "reason": "address_not_confirmed"])
            throw APIError(
                status: 403, code: .emailNotVerified,
                detail: "this address was added to an account that has other ways in: it signs in only once "
                    + "confirmed. Follow the link we mailed, or ask for a new one (broker register --resend --email "
                    + "ADDRESS)")
        }
        if hasher.needsRehash(account.passwordHash) {
            await rehash(account: account, password: password)
        }
        return account
    }

    /// Whether `password` is `account`'s current password, under the login throttle like a sign-in (RT2-6): the
    /// checks of a password change and an account deletion are guesses too, and a token must not buy unlimited
    /// ones. A blocked account or address is a 429 before any hashing.
    func verifyCurrentPassword(_ password: Secret, of account: PasswordAccount, address: String?) async throws
        -> Bool
    {
        let email = account.email
        let admission = try await admitGuess(
            account: email, address: address, blocked: "too many wrong passwords; try again later",
            busy: "the server is busy with checks of this account's password; retry shortly")
        let verified: Bool
        do {
            verified = try await verifyPassword(password, against: account.passwordHash)
        } catch {
            try? await throttle?.refund(account: email, address: address, admission: admission)
            throw error
        }
        try await throttle?.settle(account: email, address: address, admission: admission, succeeded: verified)
        return verified
    }

    /// One password guess at `account` from `address`, admitted by the login throttle before any hashing (or
    /// ``LoginThrottle/Admission/open`` without a throttle); a 429 saying `blocked` or `busy` when it is not.
    private func admitGuess(account: String, address: String?, blocked: String, busy: String) async throws
        -> LoginThrottle.Admission
    {
        let admission =
            try await throttle?.admit(account: account, address: address.map(SourceAddress.network)) ?? .open
        switch admission {
        case .blocked(let wait): throw metrics.throttle("login_throttle", wait: wait, blocked)
        case .busy: throw metrics.throttle("login_throttle", wait: 1, busy)
        case .open, .correctPasswordOnly: return admission
        }
    }

    /// Upgrades a hash made with weaker parameters, now that the password is known to be right. Best
    /// effort: a full pool or a failed write leaves the old hash, which still verifies.
    private func rehash(account: PasswordAccount, password: Secret) async {
        do {
            let fresh = try await hashPassword(password)
            try await store.updatePasswordHash(email: account.email, from: account.passwordHash, to: fresh)
            logger.info("password hash upgraded", metadata: ["broker.user": "\(account.user.id)"])
        } catch {
            logger.warning("password rehash skipped", metadata: ["broker.user": "\(account.user.id)"])
        }
    }

    /// A new password's PHC hash, made in the bounded pool.
    func hashPassword(_ password: Secret) async throws -> String {
        try await hashInPool { [hasher] in try hasher.hash(password) }
    }

    /// Whether `password` matches the PHC hash `stored`, checked in the bounded pool.
    func verifyPassword(_ password: Secret, against stored: String) async throws -> Bool {
        try await hashInPool { [hasher] in try hasher.verify(password, against: stored) }
    }

    /// Runs password work in the bounded pool; a full pool is a 429 at once.
    func hashInPool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        do {
            return try await pool.run(work)
        } catch is HashingPool.Busy {
            throw metrics.throttle("password_hashing", wait: 1, "the server is busy checking passwords; retry shortly")
        }
    }
}
