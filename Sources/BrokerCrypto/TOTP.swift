/// Time-based one-time passwords (RFC 6238 over RFC 4226's HOTP) as authenticator apps expect them: HMAC-SHA-1,
/// six digits, 30-second steps from the Unix epoch, and a key shown as RFC 4648 base32.
///
/// SHA-1 here is the one authenticator apps compute; HOTP's truncation does not rely on its collision
/// resistance (RFC 4226 Appendix A.4).
package enum TOTP {
    package static let digits = 6
    package static let period: Int64 = 30
    /// 160 bits, RFC 4226's recommendation for SHA-1.
    package static let keyLength = 20

    /// The time step `seconds` falls in.
    package static func step(at seconds: Int64) -> Int64 {
        seconds >= 0 ? seconds / period : (seconds - period + 1) / period
    }

    /// The code for time step `step` (RFC 4226 §5.3's dynamic truncation), zero-padded to six digits.
    package static func code(key: [UInt8], step: Int64) -> String {
        var counter = [UInt8](repeating: 0, count: 8)
        var value = UInt64(bitPattern: step)
        for index in stride(from: 7, through: 0, by: -1) {
            counter[index] = UInt8(truncatingIfNeeded: value)
            value >>= 8
        }
        let mac = HMAC.authenticate(.sha1, key: key, data: counter)
        let offset = Int(mac[mac.count - 1] & 0x0f)
        let binary =
            (UInt32(mac[offset] & 0x7f) << 24) | (UInt32(mac[offset + 1]) << 16) | (UInt32(mac[offset + 2]) << 8)
            | UInt32(mac[offset + 3])
        let number = String(binary % 1_000_000)
        return String(repeating: "0", count: digits - number.count) + number
    }

    /// The step among `window` steps either side of `now`'s whose code is `code`, or `nil`. Every candidate is
    /// computed and compared in constant time, so the answer's timing says nothing about which step matched.
    package static func matchingStep(key: [UInt8], code: String, now: Int64, window: Int64 = 1) -> Int64? {
        let typed = Array(code.utf8)
        guard typed.count == digits, typed.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        let current = step(at: now)
        var found: Int64?
        for candidate in (current - window)...(current + window) {
            if ConstantTime.equals(Array(Self.code(key: key, step: candidate).utf8), typed), found == nil {
                found = candidate
            }
        }
        return found
    }

    /// A fresh random key.
    package static func newKey() throws -> [UInt8] { try SecureRandom.bytes(keyLength) }

    /// The `otpauth://totp/` URI authenticator apps scan (Google Authenticator's Key Uri Format): the label is
    /// `issuer:account`, percent-encoded; the parameters say the algorithm, digits and period even where they are
    /// the defaults, so no app has to guess.
    package static func uri(key: [UInt8], issuer: String, account: String) -> String {
        let label = percentEncode(issuer) + ":" + percentEncode(account)
        return "otpauth://totp/\(label)?secret=\(Base32.encode(key))&issuer=\(percentEncode(issuer))"
            + "&algorithm=SHA1&digits=\(digits)&period=\(period)"
    }

    private static func percentEncode(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"), UInt8(ascii: "@"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF".utf8)
                out += "%" + String(decoding: [hex[Int(byte >> 4)], hex[Int(byte & 0x0f)]], as: UTF8.self)
            }
        }
        return out
    }
}

/// RFC 4648 base32 (upper case, no padding): how authenticator apps take a TOTP key typed by hand.
package enum Base32 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    package static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = (buffer << 8) | UInt32(byte)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[Int((buffer >> UInt32(bits - 5)) & 31)])
                bits -= 5
            }
        }
        if bits > 0 { out.append(alphabet[Int((buffer << UInt32(5 - bits)) & 31)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of `text` (case, spaces and padding ignored, as a key typed from a screen is); `nil` when a
    /// character is not base32 or trailing bits are not zero.
    package static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for byte in text.utf8 where byte != UInt8(ascii: " ") && byte != UInt8(ascii: "=") {
            let upper = byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z") ? byte - 32 : byte
            guard let value = alphabet.firstIndex(of: upper) else { return nil }
            buffer = (buffer << 5) | UInt32(value)
            bits += 5
            if bits >= 8 {
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits - 8)))
                bits -= 8
            }
            buffer &= (1 << UInt32(bits)) - 1
        }
        guard buffer == 0 else { return nil }
        return out
    }
}
