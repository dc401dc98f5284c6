/// What makes an email and a password acceptable for a custom account.
package enum AccountRules {
    /// NIST SP 800-63B 3.1.1.2: at least 8 characters; at most 128 is our ceiling (scrypt does not care, but
    /// a bound keeps requests small).
    static let passwordLength = 8...128

    private static let commonPasswords: Set<String> = Set(
        CommonPasswords.text.split(separator: "\n").map(String.init)
    )

    /// The email trimmed and lowercased, or why it is not an email address.
    /// The address to look an account up by: the normalized form when `raw` is a valid address, else `raw`
    /// trimmed and lowercased (a lookup that will find nothing, answered like any other).
    static func lookupEmail(_ raw: String) -> String {
        (try? normalizedEmail(raw).get()) ?? raw.trimmingWhitespace().lowercased()
    }

    package static func normalizedEmail(_ raw: String) -> Result<String, RuleViolation> {
        let email = raw.trimmingWhitespace().lowercased()
        guard !email.isEmpty else { return .failure(RuleViolation("email is empty")) }
        guard email.utf8.count <= 254 else { return .failure(RuleViolation("email is longer than 254 characters")) }
        // Every rule below reads Unicode scalars, never Characters: a Character is a whole grapheme, and a
        // prepended scalar (U+0600) glues the next one — `@`, a space, `<` — into a Character that a rule looking
        // at its first scalar accepts, letting those reach `RCPT TO` (RT2-14).
        let scalars = Array(email.unicodeScalars)
        guard scalars.filter({ $0 == "@" }).count == 1, let at = scalars.firstIndex(of: "@") else {
            return .failure(RuleViolation("email must contain exactly one @"))
        }
        let local = scalars[..<at]
        let domain = scalars[(at + 1)...]
        guard !local.isEmpty, String(String.UnicodeScalarView(local)).utf8.count <= 64 else {
            return .failure(RuleViolation("the part of the email before @ must be 1 to 64 characters"))
        }
        let localAllowed = Set("abcdefghijklmnopqrstuvwxyz0123456789.!#$%&'*+/=?^_`{|}~-".unicodeScalars)
        func isPlainNonASCII(_ scalar: Unicode.Scalar) -> Bool {
            guard scalar.value > 0x7f else { return false }
            switch scalar.properties.generalCategory {
            case .control, .format, .spaceSeparator, .lineSeparator, .paragraphSeparator, .unassigned, .surrogate,
                .privateUse:
                return false
            default: return true
            }
        }
        let localText = String(String.UnicodeScalarView(local))
        guard local.allSatisfy({ localAllowed.contains($0) || isPlainNonASCII($0) }),
            !localText.hasPrefix("."), !localText.hasSuffix("."), !localText.contains("..")
        else {
            return .failure(RuleViolation("the part of the email before @ has characters an address cannot have"))
        }
        let labels = domain.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2,
            labels.allSatisfy({ label in
                !label.isEmpty && label.count <= 63 && label.first != "-" && label.last != "-"
                    && label.allSatisfy { scalar in
                        scalar.isASCII
                            ? (("a"..."z").contains(scalar) || ("0"..."9").contains(scalar) || scalar == "-")
                            : (isPlainNonASCII(scalar)
                                && (scalar.properties.isAlphabetic || scalar.properties.numericType != nil
                                    || scalar.properties.generalCategory == .nonspacingMark
                                    || scalar.properties.generalCategory == .spacingMark))
                    }
            })
        else {
            return .failure(RuleViolation("the email's domain is not a valid domain name"))
        }
        return .success(email)
    }

    /// Why `password` is refused for `email`, or `nil` when it is acceptable.
    package static func passwordProblem(_ password: String, email: String) -> RuleViolation? {
        let length = password.count
        guard length >= passwordLength.lowerBound else {
            return RuleViolation("the password must have at least \(passwordLength.lowerBound) characters")
        }
        guard length <= passwordLength.upperBound else {
            return RuleViolation("the password must have at most \(passwordLength.upperBound) characters")
        }
        let lower = password.lowercased()
        if commonPasswords.contains(lower) {
            return RuleViolation("this password is one of the most commonly used ones; choose another")
        }
        if lower == email || lower == email.split(separator: "@").first.map(String.init) {
            return RuleViolation("the password must not be the email address")
        }
        if Set(password).count == 1 {
            return RuleViolation("the password must not repeat a single character")
        }
        return nil
    }

    /// A display name: trimmed, at most 200 characters, no control characters.
    static func displayName(_ raw: String) -> Result<String?, RuleViolation> {
        let name = raw.trimmingWhitespace()
        if name.isEmpty { return .success(nil) }
        guard name.count <= 200 else { return .failure(RuleViolation("name is longer than 200 characters")) }
        guard !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            return .failure(RuleViolation("name contains control characters"))
        }
        return .success(name)
    }
}

/// A rule an input breaks, said so that a person can fix it.
package struct RuleViolation: Error, Equatable {
    let message: String
    init(_ message: String) { self.message = message }
}

extension String {
    func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
            let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })
        else { return "" }
        return String(scalars[first...last])
    }
}
