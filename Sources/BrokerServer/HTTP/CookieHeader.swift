/// The `Cookie` request header (RFC 6265 §5.4: `name=value` pairs separated by `; `), read one way for every
/// cookie the broker sets.
enum CookieHeader {
    /// Every value of the cookie `name` in `header`, in order (a browser may send two of one name, from
    /// different paths).
    static func values(_ name: String, in header: String?) -> [Substring] {
        guard let header else { return [] }
        let prefix = name + "="
        return header.split(separator: ";").compactMap { part in
            let pair = part.drop { $0 == " " }
            return pair.hasPrefix(prefix) ? pair.dropFirst(prefix.count) : nil
        }
    }
}
