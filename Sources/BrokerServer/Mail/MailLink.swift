import BrokerCore
import BrokerCrypto
import BrokerStore

/// The single-use links the broker mails (password reset, address verification): a 256-bit secret in the URL,
/// only its SHA-256 in the store.
enum MailLink {
    /// Records a new link of `purpose` for `user` (ending the user's older ones) and returns its URL.
    static func create(
        store: any Store, issuer: String, path: String, user: UserID, purpose: String, lifetime: Int64, now: Int64
    ) async throws -> String {
        let secret = try SecureRandom.token(byteCount: 32)
        try await store.createEmailLink(
            hash: Digest.sha256(secret), user: user, purpose: purpose, expiresAt: now + lifetime, now: now)
        return issuer + path + "?token=" + secret
    }

    /// The SHA-256 of a link's secret when it has the shape of one (43 base64url characters), else `nil`.
    static func hash(_ token: String) -> [UInt8]? {
        guard token.utf8.count == 43, let bytes = Base64URL.decode(token), bytes.count == 32 else { return nil }
        return Digest.sha256(token)
    }
}

/// The CSRF guard of the broker's forms: a double-submit cookie (`HttpOnly; SameSite=Strict`, `Secure` behind
/// https, 30 minutes) whose value the form posts back, compared in constant time.
enum FormGuard {
    static let cookie = "broker_csrf"

    /// A page with a form: a fresh token goes into the page (`form` receives it) and into the cookie.
    static func page(secure: Bool, _ form: (String) -> String) throws -> APIResponse {
        let token = try SecureRandom.token(byteCount: 24)
        var response = Page.response(status: 200, form(token))
        response.headers.append(("Set-Cookie", header(token, secure: secure, expire: false)))
        return response
    }

    /// Whether the posted `field` matches the token in the `Cookie` header.
    static func accepts(cookie header: String?, field: String) -> Bool {
        guard let expected = value(in: header), !field.isEmpty else { return false }
        return ConstantTime.equals(expected, field)
    }

    /// `response` with the cookie cleared (the form has done its work).
    static func clearing(_ response: APIResponse, secure: Bool) -> APIResponse {
        var cleared = response
        cleared.headers.append(("Set-Cookie", header("", secure: secure, expire: true)))
        return cleared
    }

    private static func header(_ value: String, secure: Bool, expire: Bool) -> String {
        "\(cookie)=\(value); Path=/auth; HttpOnly; SameSite=Strict"
            + (secure ? "; Secure" : "") + (expire ? "; Max-Age=0" : "; Max-Age=1800")
    }

    private static func value(in header: String?) -> String? {
        CookieHeader.values(cookie, in: header).first.map(String.init)
    }
}
