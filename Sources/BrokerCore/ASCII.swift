extension StringProtocol {
    /// Whether the text is one or more of the ASCII digits `0`–`9`, and nothing else.
    ///
    /// `Character.isNumber` would also take `٣`, `½` or `Ⅻ`, and comparing `Character`s takes a digit with a
    /// combining mark; ids and numbers from the wire are checked byte by byte instead.
    @inlinable package var isASCIIDigits: Bool {
        !isEmpty && utf8.allSatisfy(\.isASCIIDigit)
    }
}

/// The ASCII classes the wire's grammars are written in (RFC 3986's unreserved characters, token names, hex
/// escapes), as bytes. `Character`'s own properties take other scripts' digits and letters, and comparing
/// `Character`s takes a byte with a combining mark after it: ids, escapes and names from the wire are checked
/// here, byte by byte, instead.
///
/// Inlinable: called once a byte from other modules (the form decoder, media types, `Authorization`), each was a
/// call of its own there.
extension UInt8 {
    /// `0`–`9`.
    @inlinable package var isASCIIDigit: Bool { self >= UInt8(ascii: "0") && self <= UInt8(ascii: "9") }

    /// `a`–`z`.
    @inlinable package var isASCIILowercase: Bool { self >= UInt8(ascii: "a") && self <= UInt8(ascii: "z") }

    /// `A`–`Z`.
    @inlinable package var isASCIIUppercase: Bool { self >= UInt8(ascii: "A") && self <= UInt8(ascii: "Z") }

    /// `A`–`Z`, `a`–`z` and `0`–`9`.
    @inlinable package var isASCIIAlphanumeric: Bool { isASCIIDigit || isASCIILowercase || isASCIIUppercase }

    /// RFC 3986's unreserved characters: letters, digits, `-`, `.`, `_` and `~`.
    @inlinable package var isURIUnreserved: Bool {
        isASCIIAlphanumeric || self == UInt8(ascii: "-") || self == UInt8(ascii: ".") || self == UInt8(ascii: "_")
            || self == UInt8(ascii: "~")
    }

    /// The value of a hex digit (`0`–`9`, `a`–`f`, `A`–`F`); `nil` for any other byte.
    @inlinable package var asciiHexValue: UInt8? {
        if isASCIIDigit { return self - UInt8(ascii: "0") }
        let lower = self | 0x20
        guard lower >= UInt8(ascii: "a"), lower <= UInt8(ascii: "f") else { return nil }
        return lower - UInt8(ascii: "a") + 10
    }

    /// `A`–`Z` as `a`–`z`; every other byte as it is.
    @inlinable package var asciiLowercased: UInt8 { isASCIIUppercase ? self | 0x20 : self }

    /// `a`–`z` as `A`–`Z`; every other byte as it is.
    @inlinable package var asciiUppercased: UInt8 { isASCIILowercase ? self & ~0x20 : self }

    /// HTTP's optional white space, a space or a horizontal tab (RFC 9110 §5.6.3): what may stand around a
    /// field's value, a media type or an authorization scheme's credentials.
    @inlinable package var isHTTPWhitespace: Bool { self == UInt8(ascii: " ") || self == UInt8(ascii: "\t") }
}
