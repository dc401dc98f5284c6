import BrokerCore
import BrokerCrypto

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
