import Glibc

/// The network a request came from, as per-address limits count it: an IPv4 address alone, an IPv6 address by
/// its /64 (one subscriber's LAN or one server's allocation — a host picks any of its 2^64 addresses at will,
/// so counting single IPv6 addresses counts nothing), an IPv4-mapped IPv6 address as the IPv4 address it is.
package enum SourceAddress {
    /// `203.0.113.7` → itself; `2001:db8:1:2:a:b:c:d` → `2001:db8:1:2::/64`; anything unparsable as it is.
    package static func network(_ address: String) -> String {
        // Plain byte buffers rather than in_addr / in6_addr: a release build resolves those to NIO's C module.
        var v4 = [UInt8](repeating: 0, count: 4)
        if inet_pton(AF_INET, address, &v4) == 1 { return address }
        var bytes = [UInt8](repeating: 0, count: 16)
        guard inet_pton(AF_INET6, address, &bytes) == 1 else { return address }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF {
            return "\(bytes[12]).\(bytes[13]).\(bytes[14]).\(bytes[15])"
        }
        var groups: [String] = []
        for index in stride(from: 0, to: 8, by: 2) {
            groups.append(String(UInt16(bytes[index]) << 8 | UInt16(bytes[index + 1]), radix: 16))
        }
        // Trailing zero groups fold into the "::" already there.
        while groups.last == "0" { groups.removeLast() }
        return groups.joined(separator: ":") + "::/64"
    }
}
