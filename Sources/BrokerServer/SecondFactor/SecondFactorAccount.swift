import BrokerConfiguration
import BrokerCore
import BrokerStore
import Logging

/// The JSON endpoints where a person manages their second factor (`broker mfa …`): status, enrolment,
/// removal and new recovery codes. Changes need an account token (never an API access token, RT2-1) — except
/// the start of an enrolment, which also takes the email and password, so that an account a broker with
/// `server.require_mfa` does not let sign in without one can add it.
final class SecondFactorAccount: ContextualService {
    let accounts: AccountService
    var secondFactors: SecondFactorService { accounts.secondFactors }
    var context: ServiceContext { accounts.context }

    init(accounts: AccountService) { self.accounts = accounts }

    /// `GET /auth/mfa` with an account token.
    func status(authorization: String?) async throws -> APIResponse {
        let view = try await tokens.authenticateAccount(authorization: authorization)
        return APIResponse(
            status: 200, body: try await secondFactors.status(of: view.user.id),
            headers: [("Cache-Control", "no-store")])
    }

    /// `POST /auth/mfa/totp` with an account token, or `{"email", "password"}`: a new key (not stored yet) as
    /// `{"otpauth_uri", "key", "enrolment", "expires_in"}`. Only a password account has one: a provider's
    /// user reaches two factors with a passkey.
    func begin(_ input: RequestInput, authorization: String?, address: String?) async throws -> APIResponse {
        let account: PasswordAccount
        if authorization != nil {
            let view = try await tokens.authenticateAccount(authorization: authorization)
            try await StepUp.requireStrongest(view, authorization: authorization, store: store, now: now)
            guard let found = try await store.passwordAccount(user: view.user.id) else {
                throw APIError.invalidRequest(
                    "a second factor goes with a password, and this account has none; add a passkey instead "
                        + "(broker passkey add), which is two factors by itself")
            }
            account = found
        } else {
            account = try await accounts.authenticate(
                email: try input.string("email"), password: Secret(try input.string("password")), address: address)
        }
        guard try await secondFactors.factor(of: account.user.id) == nil else {
            throw APIError.conflict(
                "this account has a second factor already; remove it first (broker mfa totp remove)")
        }
        let started = try secondFactors.begin(user: account.user.id, account: account.email)
        return APIResponse(
            status: 200,
            body: [
                "otpauth_uri": .string(started.uri), "key": .string(started.key),
                "enrolment": .string(started.enrolment),
                "expires_in": .int(SecondFactorService.enrolmentLifetime),
            ],
            headers: [("Cache-Control", "no-store")])
    }

    /// `POST /auth/mfa/totp/confirm {"enrolment", "code"}`: the key is stored once the code matches; the answer
    /// carries the recovery codes, shown once (`{"recovery_codes": […]}`). The sealed enrolment is what proves
    /// who asked (it was given only after the account token or the password).
    func confirm(_ input: RequestInput, address: String?) async throws -> APIResponse {
        let enrolment = try input.string("enrolment")
        guard let user = secondFactors.enrolmentUser(enrolment) else {
            throw APIError.invalidRequest("the enrolment is unknown or expired; start again (broker mfa totp add)")
        }
        let codes = try await secondFactors.confirm(
            enrolment: enrolment, code: try input.string("code"), user: user, address: address)
        return APIResponse(
            status: 201, body: ["status": "added", "recovery_codes": .array(codes.map(JSONValue.string))],
            headers: [("Cache-Control", "no-store")])
    }

    /// `POST /auth/mfa/totp/remove {"password", "code"}` with an account token: a fresh proof of both factors
    /// (the password and a code from the app, or a recovery code) — a token alone never removes one.
    func remove(_ input: RequestInput, authorization: String?, address: String?) async throws -> APIResponse {
        let view = try await tokens.authenticateAccount(authorization: authorization)
        try await freshProof(input, user: view.user.id, address: address, event: "second_factor_removed")
        guard try await secondFactors.remove(user: view.user.id) else {
            throw APIError.notFound("this account has no second factor")
        }
        return APIResponse(status: 200, body: ["status": "removed"], headers: [("Cache-Control", "no-store")])
    }

    /// `POST /auth/mfa/recovery-codes {"code"}` with an account token: new codes in place of the old, once a
    /// code from the app (or an unused recovery code) shows the factor is at hand.
    func recoveryCodes(_ input: RequestInput, authorization: String?, address: String?) async throws -> APIResponse {
        let view = try await tokens.authenticateAccount(authorization: authorization)
        guard try await secondFactors.factor(of: view.user.id) != nil else {
            throw APIError.notFound("this account has no second factor (broker mfa totp add)")
        }
        guard try await secondFactors.check(try input.string("code"), user: view.user.id, address: address) != nil
        else {
            audit.record(
                "recovery_codes_replaced", outcome: "failure", user: view.user.id, fields: ["reason": "wrong_code"])
            throw APIError(status: 401, code: .invalidCredentials, detail: "wrong or already used code")
        }
        let codes = try await secondFactors.regenerateRecoveryCodes(user: view.user.id)
        return APIResponse(
            status: 200, body: ["recovery_codes": .array(codes.map(JSONValue.string))],
            headers: [("Cache-Control", "no-store")])
    }

    /// The password (under the login throttle) and a good code, or the refusal.
    private func freshProof(_ input: RequestInput, user: UserID, address: String?, event: String) async throws {
        guard let account = try await store.passwordAccount(user: user) else {
            throw APIError.notFound("this account has no second factor")
        }
        guard
            try await accounts.verifyCurrentPassword(
                Secret(try input.string("password")), of: account, address: address)
        else {
            audit.record(event, outcome: "failure", user: user, fields: ["reason": "wrong_password"])
            throw APIError.invalidCredentials
        }
        guard try await secondFactors.check(try input.string("code"), user: user, address: address) != nil else {
            audit.record(event, outcome: "failure", user: user, fields: ["reason": "wrong_code"])
            throw APIError(status: 401, code: .invalidCredentials, detail: "wrong or already used code")
        }
    }
}
