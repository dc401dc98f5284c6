import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging

/// A password account's second factor (issue "A second factor"): a TOTP key (RFC 6238) and single-use
/// recovery codes.
///
/// - The key is sealed (AES-256-GCM under the store's `second-factors` key, bound to the user id) before it is
///   stored; recovery codes are kept as HMAC-SHA-256 under a key derived from the same one, so a copy of the
///   database yields neither.
/// - A code is good once: the newest accepted step is stored and only a later one is taken, as one
///   conditional write, so the same code cannot sign in twice even on two brokers sharing the store.
/// - Every guess goes through the login throttle (its own key per user, the same address keys as passwords):
///   six digits are not a secret that survives unlimited tries.
/// - Codes are accepted one step either side of now (±30 s) for clocks that drift; nothing further.
final class SecondFactorService: ContextualService {
    let context: ServiceContext
    let throttle: LoginThrottle?
    let mailer: Mailer?
    private let sealingKey: [UInt8]
    private let recoveryKey: HMACKey
    private let flowKey: [UInt8]

    static let recoveryCodeCount = 10
    /// How long the code step of a sign-in may wait after the password (seconds).
    static let ticketLifetime: Int64 = 300
    /// How long an enrolment may wait for its first code.
    static let enrolmentLifetime: Int64 = 600
    /// How many steps either side of now a code may be from.
    static let window: Int64 = 1

    init(context: ServiceContext, key: [UInt8], flowKey: [UInt8], throttle: LoginThrottle?, mailer: Mailer?) {
        self.context = context
        self.throttle = throttle
        self.mailer = mailer
        sealingKey = HMAC.authenticate(.sha256, key: key, data: Array("totp key sealing".utf8))
        recoveryKey = HMACKey(.sha256, key: HMAC.authenticate(.sha256, key: key, data: Array("recovery codes".utf8)))
        self.flowKey = flowKey
    }

    // MARK: What the account has

    func factor(of user: UserID) async throws -> TOTPFactorRecord? { try await store.totpFactor(user: user) }

    /// `GET /auth/mfa` (and `broker mfa status`): whether the account has a second factor, since when, and how
    /// many recovery codes are left.
    func status(of user: UserID) async throws -> JSONValue {
        guard let factor = try await factor(of: user) else {
            return ["totp": false, "recovery_codes_left": 0, "required": .bool(configuration.requireMFA)]
        }
        return [
            "totp": true, "totp_added_at": .string(RFC3339.format(epochSeconds: factor.createdAt)),
            "recovery_codes_left": .int(Int64(try await store.recoveryCodesLeft(user: user))),
            "required": .bool(configuration.requireMFA),
        ]
    }

    // MARK: Enrolment

    /// A new key for `user`, not stored yet: its `otpauth://` URI, its base32 text, and a sealed enrolment that
    /// ``confirm(enrolment:code:user:)`` takes back with the first code the app shows.
    func begin(user: UserID, account: String) throws -> (uri: String, key: String, enrolment: String) {
        let key = try TOTP.newKey()
        let enrolment = try SealedDocument.seal(
            [
                "u": .string(user.description), "k": .string(Base64URL.encode(key)),
                "exp": .int(now + Self.enrolmentLifetime),
            ],
            key: flowKey, purpose: Array("broker totp enrolment".utf8))
        return (TOTP.uri(key: key, issuer: Self.issuerLabel(issuer), account: account), Base32.encode(key), enrolment)
    }

    /// The label authenticator apps list the account under: the broker's host.
    static func issuerLabel(_ issuer: String) -> String {
        let host =
            issuer.hasPrefix("https://")
            ? issuer.dropFirst(8) : issuer.hasPrefix("http://") ? issuer.dropFirst(7) : Substring(issuer)
        return String(host.prefix { $0 != "/" })
    }

    /// A live enrolment's URI and key text again (the account page shows them once more after a mistyped code).
    func reopen(enrolment: String, account: String) -> (uri: String, key: String)? {
        guard
            let fields = SealedDocument.open(
                enrolment, key: flowKey, purpose: Array("broker totp enrolment".utf8), maxLength: 512),
            let expires = fields["exp"]?.intValue, expires > now,
            let key = fields["k"]?.stringValue.flatMap(Base64URL.decode), key.count == TOTP.keyLength
        else { return nil }
        return (TOTP.uri(key: key, issuer: Self.issuerLabel(issuer), account: account), Base32.encode(key))
    }

    /// The user an enrolment was started for, while it is live.
    func enrolmentUser(_ enrolment: String) -> UserID? {
        guard
            let fields = SealedDocument.open(
                enrolment, key: flowKey, purpose: Array("broker totp enrolment".utf8), maxLength: 512),
            let expires = fields["exp"]?.intValue, expires > now
        else { return nil }
        return fields["u"]?.stringValue.flatMap(UserID.init)
    }

    /// Stores the enrolment's key once `code` shows the app computes it, with fresh recovery codes (returned,
    /// shown once). The confirming code's step counts as used.
    func confirm(enrolment: String, code: String, user: UserID, address: String?) async throws -> [String] {
        guard
            let fields = SealedDocument.open(
                enrolment, key: flowKey, purpose: Array("broker totp enrolment".utf8), maxLength: 512),
            fields["u"]?.stringValue == user.description, let expires = fields["exp"]?.intValue, expires > now,
            let key = fields["k"]?.stringValue.flatMap(Base64URL.decode), key.count == TOTP.keyLength
        else {
            throw APIError.invalidRequest("the enrolment is unknown or expired; start again (broker mfa totp add)")
        }
        let step = try await guarded(user: user, address: address) {
            TOTP.matchingStep(key: key, code: Self.digits(code), now: self.now, window: Self.window)
        }
        guard let step else {
            audit.record("second_factor_added", outcome: "failure", user: user, fields: ["reason": "wrong_code"])
            throw APIError(
                status: 400, code: .invalidCredentials,
                detail: "the code does not match: check the authenticator app's clock and type the code it shows now")
        }
        let (codes, hashes) = try newRecoveryCodes()
        do {
            try await store.addTOTPFactor(
                TOTPFactorRecord(userID: user, sealedKey: try seal(key, user: user), createdAt: now, lastStep: step),
                recoveryCodes: hashes, now: now)
        } catch let error as StoreError where error.code == .conflict {
            throw APIError(
                status: 409, code: .conflict,
                detail: "this account has a second factor already; remove it first (broker mfa totp remove)")
        }
        audit.record("second_factor_added", user: user, fields: ["method": "totp"])
        logger.info("second factor added", metadata: ["broker.user": "\(user)"])
        await notify(user, change: "An authenticator app (TOTP) was added as its second factor.")
        return codes
    }

    /// Removes the factor and its recovery codes; the caller has checked a fresh sign-in with it.
    func remove(user: UserID) async throws -> Bool {
        guard try await store.removeTOTPFactor(user: user) else { return false }
        audit.record("second_factor_removed", user: user, fields: ["method": "totp"])
        logger.info("second factor removed", metadata: ["broker.user": "\(user)"])
        await notify(user, change: "Its second factor (the authenticator app) and its recovery codes were removed.")
        return true
    }

    /// New recovery codes in place of the old ones (returned, shown once).
    func regenerateRecoveryCodes(user: UserID) async throws -> [String] {
        let (codes, hashes) = try newRecoveryCodes()
        try await store.replaceRecoveryCodes(user: user, hashes: hashes, now: now)
        audit.record("recovery_codes_replaced", user: user)
        await notify(user, change: "New recovery codes were made; the old ones no longer work.")
        return codes
    }

    // MARK: Checking a code

    /// How a code was good.
    enum Method: String, Sendable {
        case totp
        case recovery
    }

    /// Whether `code` — six digits from the app, or a recovery code — is good for `user` now, under the login
    /// throttle. A good code is spent: its step (or the recovery code) never signs in again.
    func check(_ code: String, user: UserID, address: String?) async throws -> Method? {
        guard let factor = try await factor(of: user) else { return nil }
        let typed = Self.digits(code)
        return try await guarded(user: user, address: address) {
            if typed.utf8.count == TOTP.digits {
                let key = try self.open(factor)
                guard let step = TOTP.matchingStep(key: key, code: typed, now: self.now, window: Self.window),
                    step > factor.lastStep, try await self.store.recordTOTPStep(user: user, step: step)
                else { return nil }
                return .totp
            }
            guard let normalized = Self.recoveryCode(code),
                try await self.store.spendRecoveryCode(user: user, hash: self.hash(normalized), now: self.now)
            else { return nil }
            let left = try await self.store.recoveryCodesLeft(user: user)
            self.audit.record("recovery_code_used", user: user, fields: ["left": "\(left)"])
            await self.notify(user, change: "A recovery code was used to sign in; \(left) are left.")
            return .recovery
        }
    }

    /// Runs one guess under the login throttle (`second-factor <user>`, and the address): refused with 429
    /// while blocked; settled as a success when `body` gives a value.
    private func guarded<T: Sendable>(user: UserID, address: String?, _ body: () async throws -> T?) async throws
        -> T?
    {
        let account = "second-factor \(user)"
        let network = address.map(SourceAddress.network)
        let admission = try await throttle?.admit(account: account, address: network) ?? .open
        switch admission {
        case .blocked(let wait): throw metrics.throttle("login_throttle", wait: wait, "too many wrong codes; try later")
        case .busy: throw metrics.throttle("login_throttle", wait: 1, "the server is busy with codes; retry shortly")
        case .open, .correctPasswordOnly: break
        }
        let result: T?
        do {
            result = try await body()
        } catch {
            try? await throttle?.refund(account: account, address: network, admission: admission)
            throw error
        }
        try await throttle?.settle(account: account, address: network, admission: admission, succeeded: result != nil)
        return result
    }

    // MARK: The code step of a sign-in

    /// A sealed note that `user` gave the right password at `now`, for the code page or the CLI's second
    /// request (five minutes).
    func ticket(for user: UserID) throws -> String {
        try SealedDocument.seal(
            ["u": .string(user.description), "exp": .int(now + Self.ticketLifetime)], key: flowKey,
            purpose: Array("broker second-factor ticket".utf8))
    }

    /// The user of a live ticket.
    func user(ofTicket ticket: String) -> UserID? {
        guard
            let fields = SealedDocument.open(
                ticket, key: flowKey, purpose: Array("broker second-factor ticket".utf8), maxLength: 512),
            let expires = fields["exp"]?.intValue, expires > now
        else { return nil }
        return fields["u"]?.stringValue.flatMap(UserID.init)
    }

    // MARK: Secrets

    private func seal(_ key: [UInt8], user: UserID) throws -> String {
        Base64URL.encode(
            try AESGCM.seal(key, key: sealingKey, associatedData: Array("broker totp \(user)".utf8)))
    }

    private func open(_ factor: TOTPFactorRecord) throws -> [UInt8] {
        guard let box = Base64URL.decode(factor.sealedKey),
            let key = AESGCM.open(box, key: sealingKey, associatedData: Array("broker totp \(factor.userID)".utf8))
        else {
            logger.error("a stored second-factor key cannot be opened", metadata: ["broker.user": "\(factor.userID)"])
            throw APIError.serverError
        }
        return key
    }

    private func hash(_ code: String) -> [UInt8] { recoveryKey.authenticate(Array(code.utf8)) }

    /// Ten codes of ten base32 letters (50 bits each), shown as `abcde-fghij`, and their hashes.
    private func newRecoveryCodes() throws -> ([String], [[UInt8]]) {
        var codes: [String] = []
        var hashes: [[UInt8]] = []
        for _ in 0..<Self.recoveryCodeCount {
            let letters = String(Base32.encode(try SecureRandom.bytes(7)).lowercased().prefix(10))
            codes.append(String(letters.prefix(5)) + "-" + String(letters.suffix(5)))
            hashes.append(hash(letters))
        }
        return (codes, hashes)
    }

    /// A typed recovery code as it was hashed: lower case, without dashes and spaces; `nil` unless ten base32
    /// letters remain.
    static func recoveryCode(_ typed: String) -> String? {
        let letters = typed.lowercased().filter { $0 != "-" && $0 != " " }
        guard letters.utf8.count == 10, letters.utf8.allSatisfy({ Self.recoveryAlphabet.contains($0) }) else {
            return nil
        }
        return letters
    }

    private static let recoveryAlphabet = Set("abcdefghijklmnopqrstuvwxyz234567".utf8)

    /// A typed TOTP code without the spaces apps show in the middle ("123 456").
    static func digits(_ typed: String) -> String { typed.filter { $0 != " " } }

    // MARK: Telling the owner

    /// Mails the account's confirmed address about a change (best effort, after the answer).
    func notify(_ user: UserID, change: String) async {
        guard let mailer else { return }
        mailer.enqueue(.secondFactor) {
            do {
                guard let account = try await self.store.passwordAccount(user: user), account.emailVerifiedAt != nil
                else { return nil }
                return mailer.compose(
                    .secondFactor, to: account.email, name: account.user.name,
                    link: self.issuer + "/auth/password/forgot", minutes: 0, values: ["change": change])
            } catch {
                self.logger.error("second-factor notice not sent", metadata: ["error": "\(error)"])
                return nil
            }
        }
    }
}
