extension StringProtocol {
    /// Whether the text is one or more of the ASCII digits `0`–`9`, and nothing else.
    ///
    /// `Character.isNumber` would also take `٣`, `½` or `Ⅻ`, and comparing `Character`s takes a digit with a
    /// combining mark; ids and numbers from the wire are checked byte by byte instead.
    package var isASCIIDigits: Bool {
        !isEmpty && utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
    }
}
