/// Whether an IP address is one the whole Internet can reach: what an outbound call to a URL someone else chose
/// may connect to (``HTTPClientRequest/publicAddressesOnly``). Everything IANA's special-purpose registries
/// (RFC 6890 and its successors) mark as not globally reachable is refused: loopback, private, shared (CGN),
/// link-local, documentation, benchmarking, multicast, reserved, and the IPv6 forms that carry an IPv4 address
/// (mapped, NAT64, 6to4) judged by that address.
package enum PublicAddress {
    /// `bytes`: 4 (IPv4) or 16 (IPv6), in network order; anything else is not public.
    package static func isPublic(_ bytes: [UInt8]) -> Bool {
        switch bytes.count {
        case 4: return isPublicV4(bytes)
        case 16: return isPublicV6(bytes)
        default: return false
        }
    }

    private static func isPublicV4(_ a: [UInt8]) -> Bool {
        switch (a[0], a[1], a[2]) {
        case (0, _, _), (10, _, _), (127, _, _): return false
        case (100, 64...127, _): return false  // shared address space (RFC 6598)
        case (169, 254, _): return false  // link-local
        case (172, 16...31, _): return false
        case (192, 0, 0), (192, 0, 2), (192, 88, 99), (192, 168, _): return false
        case (198, 18...19, _), (198, 51, 100), (203, 0, 113): return false
        case (224...255, _, _): return false  // multicast, reserved, broadcast
        default: return true
        }
    }

    private static func isPublicV6(_ a: [UInt8]) -> Bool {
        let zeroPrefix = a[0..<10].allSatisfy { $0 == 0 }
        // ::/128, ::1, and the IPv4-compatible ::a.b.c.d (deprecated): none is public.
        if zeroPrefix && a[10] == 0 && a[11] == 0 { return false }
        // ::ffff:a.b.c.d (mapped): the IPv4 address decides.
        if zeroPrefix && a[10] == 0xFF && a[11] == 0xFF { return isPublicV4(Array(a[12..<16])) }
        // 64:ff9b::/96 and 64:ff9b:1::/48 (NAT64): the embedded IPv4 address decides.
        if a[0] == 0x00, a[1] == 0x64, a[2] == 0xFF, a[3] == 0x9B { return isPublicV4(Array(a[12..<16])) }
        // 2002::/16 (6to4): the IPv4 address in bits 16–47 decides.
        if a[0] == 0x20, a[1] == 0x02 { return isPublicV4(Array(a[2..<6])) }
        if a[0] & 0xFE == 0xFC { return false }  // unique local fc00::/7
        if a[0] == 0xFE && a[1] & 0xC0 == 0x80 { return false }  // link-local fe80::/10
        if a[0] == 0xFE && a[1] & 0xC0 == 0xC0 { return false }  // site-local fec0::/10 (deprecated)
        if a[0] == 0xFF { return false }  // multicast
        if a[0] == 0x01, a[1] == 0x00, a[2..<8].allSatisfy({ $0 == 0 }) { return false }  // discard 100::/64
        if a[0] == 0x20, a[1] == 0x01, a[2] == 0x0D, a[3] == 0xB8 { return false }  // documentation
        if a[0] == 0x20, a[1] == 0x01, a[2] == 0x00, a[3] < 0x02 { return false }  // 2001::/23 (Teredo, ORCHID…)
        return a[0] & 0xE0 == 0x20  // global unicast is 2000::/3
    }

    /// The address as text, for messages.
    package static func text(_ bytes: [UInt8]) -> String {
        if bytes.count == 4 { return bytes.map(String.init).joined(separator: ".") }
        guard bytes.count == 16 else { return "an address of another family" }
        var groups: [String] = []
        for index in stride(from: 0, to: 16, by: 2) {
            groups.append(String(UInt16(bytes[index]) << 8 | UInt16(bytes[index + 1]), radix: 16))
        }
        return "[" + groups.joined(separator: ":") + "]"
    }
}
