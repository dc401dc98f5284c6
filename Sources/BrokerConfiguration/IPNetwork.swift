import Glibc

/// An IP address or a CIDR range (`203.0.113.7`, `10.0.0.0/8`, `::1`, `2001:db8::/32`), as
/// `server.trusted_proxies` lists them. IPv4-mapped IPv6 addresses (`::ffff:10.1.2.3`) are matched as the
/// IPv4 address they carry.
package struct IPNetwork: Sendable, Hashable, CustomStringConvertible {
    /// 4 or 16 bytes, the bits past ``prefixLength`` zero.
    package let bytes: [UInt8]
    package let prefixLength: Int

    /// `nil` unless `text` is an address, or an address, `/` and a prefix length that fits it.
    package init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = Self.parse(String(parts[0])) else { return nil }
        let length: Int
        if parts.count == 2 {
            guard parts[1].allSatisfy(\.isASCII), parts[1].allSatisfy(\.isNumber), parts[1].count <= 3,
                let number = Int(parts[1]), number <= address.count * 8
            else { return nil }
            length = number
        } else {
            length = address.count * 8
        }
        bytes = Self.masked(address, length)
        prefixLength = length
    }

    /// Whether `address` (text as a socket reports it) lies in this network.
    package func contains(_ address: String) -> Bool {
        guard let parsed = Self.parse(address), parsed.count == bytes.count else { return false }
        return Self.masked(parsed, prefixLength) == bytes
    }

    package var description: String {
        let text: String
        if bytes.count == 4 {
            text = bytes.map(String.init).joined(separator: ".")
        } else {
            text = stride(from: 0, to: 16, by: 2).map {
                String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16)
            }.joined(separator: ":")
        }
        return text + "/\(prefixLength)"
    }

    /// The address's bytes: 4 for IPv4 and IPv4-mapped IPv6, else 16.
    static func parse(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, text, &v6) == 1 else { return nil }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF {
            return Array(bytes[12...])
        }
        return bytes
    }

    private static func masked(_ bytes: [UInt8], _ length: Int) -> [UInt8] {
        bytes.enumerated().map { index, byte in
            let kept = min(8, max(0, length - index * 8))
            return kept == 8 ? byte : byte & ~(0xFF >> kept)
        }
    }
}

/// `server.trusted_proxies`: the peers whose `X-Forwarded-For` is believed, and who are exempt from the
/// per-address connection share (one proxy carries many clients).
package struct TrustedProxies: Sendable, Hashable {
    package var networks: [IPNetwork]

    package init(_ networks: [IPNetwork] = []) { self.networks = networks }

    package func contains(_ address: String) -> Bool { networks.contains { $0.contains(address) } }

    /// The client a request stands for: the peer, unless the peer is trusted — then, reading `X-Forwarded-For`
    /// from the right (each proxy appends the address it saw), the first address that is not a trusted
    /// proxy. An entry that is not an address ends the walk at the hop that wrote it: nobody can put words
    /// in a trusted proxy's mouth by sending a header it then extends. Several header lines are one list.
    package func client(peer: String?, forwardedFor lines: [String]) -> String? {
        guard let peer, contains(peer), !lines.isEmpty else { return peer }
        let entries = lines.flatMap { $0.split(separator: ",") }.map {
            String($0.trimmingASCIIWhitespace())
        }
        var client = peer
        for entry in entries.reversed() {
            guard IPNetwork.parse(entry) != nil else { return client }
            client = entry
            if !contains(entry) { return entry }
        }
        return client
    }
}

extension Substring {
    fileprivate func trimmingASCIIWhitespace() -> Substring {
        var text = self
        while let first = text.first, first == " " || first == "\t" { text = text.dropFirst() }
        while let last = text.last, last == " " || last == "\t" { text = text.dropLast() }
        return text
    }
}
