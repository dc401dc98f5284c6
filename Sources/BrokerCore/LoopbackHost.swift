/// This machine, as a URL or a connection names it: `localhost`, an address in 127.0.0.0/8 (four decimal
/// octets, each 0–255), or `::1` (bare or bracketed). The one rule for every place that relaxes https or TLS
/// for this machine — database URLs, mail servers, `api_urls`, broker URLs, provider endpoints, app redirect
/// URIs — so that no two of them disagree, and no name that merely starts with `127.` (a DNS name such as
/// `127.example.com` is one) passes for this machine.
package enum LoopbackHost {
    package static func contains(_ host: some StringProtocol) -> Bool {
        let lower = host.lowercased()
        if lower == "localhost" || lower == "::1" || lower == "[::1]" { return true }
        let octets = lower.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets[0] == "127"
            && octets.allSatisfy { octet in
                (1...3).contains(octet.utf8.count) && octet.utf8.allSatisfy(\.isASCIIDigit)
                    && (Int(octet) ?? 256) <= 255
            }
    }
}
