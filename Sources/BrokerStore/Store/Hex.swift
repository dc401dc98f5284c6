import BrokerCore

extension [UInt8] {
    /// Lowercase hex, the form hashes are stored in.
    package var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(count * 2)
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of lowercase or uppercase hex; `nil` for anything else.
    package init?(hex: String) {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = digits[index].asciiHexValue, let low = digits[index + 1].asciiHexValue else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        self = bytes
    }
}
