package import BrokerCore
import BrokerCrypto

/// OAuth 1.0a request signing, HMAC-SHA1, exactly as RFC 5849 §3.4 defines it.
package enum OAuth1 {
    /// §3.6: UTF-8, then every byte outside `ALPHA / DIGIT / "-" / "." / "_" / "~"` as `%XX` (upper case) —
    /// RFC 3986's unreserved set, which ``FormEncoding/percentEncode(_:)`` already implements.
    package static func percentEncode(_ text: String) -> String { FormEncoding.percentEncode(text) }

    /// §3.4.1.2: scheme and host in lower case, the port only when it is not the scheme's default, the
    /// path; no query, no fragment. `nil` for a URL that is not absolute http(s).
    package static func baseStringURI(_ url: String) -> String? {
        let lower = url.lowercased()
        let scheme: String
        if lower.hasPrefix("http://") {
            scheme = "http"
        } else if lower.hasPrefix("https://") {
            scheme = "https"
        } else {
            return nil
        }
        let rest = url.dropFirst(scheme.count + 3)
        let isDelimiter: (Character) -> Bool = { $0 == "/" || $0 == "?" || $0 == "#" }
        let authorityEnd: Substring.Index = rest.firstIndex(where: isDelimiter) ?? rest.endIndex
        var authority = rest[..<authorityEnd].lowercased()
        guard !authority.isEmpty, !authority.contains("@") else { return nil }
        if scheme == "http", authority.hasSuffix(":80") { authority.removeLast(3) }
        if scheme == "https", authority.hasSuffix(":443") { authority.removeLast(4) }
        let afterAuthority = rest[authorityEnd...]
        var path = String(afterAuthority.prefix { $0 != "?" && $0 != "#" })
        if path.isEmpty { path = "/" }
        return "\(scheme)://\(authority)\(path)"
    }

    /// The query parameters of `url`, decoded as `application/x-www-form-urlencoded` (§3.4.1.3.1).
    package static func queryParameters(_ url: String) -> [(String, String)]? {
        guard let mark = url.firstIndex(of: "?") else { return [] }
        let query = url[url.index(after: mark)...].prefix { $0 != "#" }
        return FormEncoding.decode(String(query))
    }

    /// §3.4.1: `METHOD&encode(base URI)&encode(normalized parameters)`, the parameters being the URL's
    /// query, the form body's and the `oauth_*` protocol parameters (without `oauth_signature`), each name
    /// and value encoded, sorted by name and then value, joined with `=` and `&` (§3.4.1.3.2).
    package static func signatureBaseString(method: String, url: String, parameters: [(String, String)]) -> String? {
        guard let uri = baseStringURI(url), let query = queryParameters(url) else { return nil }
        let all: [(String, String)] = (query + parameters).filter { $0.0 != "oauth_signature" }
        var pairs: [(String, String)] = all.map { (percentEncode($0.0), percentEncode($0.1)) }
        pairs.sort { (left: (String, String), right: (String, String)) -> Bool in
            left.0 == right.0 ? left.1 < right.1 : left.0 < right.0
        }
        let normalized = pairs.map { $0.0 + "=" + $0.1 }.joined(separator: "&")
        return method.uppercased() + "&" + percentEncode(uri) + "&" + percentEncode(normalized)
    }

    /// §3.4.2: base64(HMAC-SHA1(key = encode(consumer secret) & encode(token secret), base string)).
    package static func signature(baseString: String, consumerSecret: Secret, tokenSecret: Secret?) -> String {
        let key = percentEncode(consumerSecret.exposed) + "&" + percentEncode(tokenSecret?.exposed ?? "")
        return Base64URL.encodeStandard(HMAC.authenticate(.sha1, key: Array(key.utf8), data: Array(baseString.utf8)))
    }

    /// The protocol parameters of a signed request, `oauth_signature` included (§3.1).
    package static func sign(
        method: String, url: String, body: [(String, String)] = [], consumerKey: String, consumerSecret: Secret,
        token: String? = nil, tokenSecret: Secret? = nil, extra: [(String, String)] = [], nonce: String,
        timestamp: Int64
    ) -> [(String, String)]? {
        var oauth: [(String, String)] = [
            ("oauth_consumer_key", consumerKey), ("oauth_nonce", nonce), ("oauth_signature_method", "HMAC-SHA1"),
            ("oauth_timestamp", String(timestamp)), ("oauth_version", "1.0"),
        ]
        if let token { oauth.append(("oauth_token", token)) }
        oauth += extra
        guard let base = signatureBaseString(method: method, url: url, parameters: oauth + body) else { return nil }
        oauth.append(
            ("oauth_signature", signature(baseString: base, consumerSecret: consumerSecret, tokenSecret: tokenSecret)))
        return oauth
    }

    /// `Authorization: OAuth k="v", …` (§3.5.1), every name and value percent-encoded.
    package static func authorizationHeader(_ oauth: [(String, String)]) -> String {
        "OAuth " + oauth.map { "\(percentEncode($0.0))=\"\(percentEncode($0.1))\"" }.joined(separator: ", ")
    }

    /// Parses an `Authorization: OAuth …` header into its parameters; `nil` when malformed.
    package static func parseAuthorization(_ header: String) -> [(String, String)]? {
        guard header.hasPrefix("OAuth ") else { return nil }
        var result: [(String, String)] = []
        for item in header.dropFirst(6).split(separator: ",") {
            let trimmed = item.drop { $0 == " " }
            guard let equals = trimmed.firstIndex(of: "=") else { return nil }
            let name = trimmed[..<equals]
            var value = trimmed[trimmed.index(after: equals)...]
            guard value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 else { return nil }
            value = value.dropFirst().dropLast()
            guard let decodedName = FormEncoding.percentDecode(name, plusIsSpace: false),
                let decodedValue = FormEncoding.percentDecode(value, plusIsSpace: false)
            else { return nil }
            result.append((decodedName, decodedValue))
        }
        return result
    }
}
