import BrokerCore
import BrokerServer
import Testing

/// `Authorization: <scheme> <credentials>` read among the bytes (``AuthorizationCredentials``): the same reading
/// as the splitting by `Character`s it replaced, on every value built from the pieces below.
@Suite("Authorization field: scheme and credentials")
struct AuthorizationCredentialsTests {
    /// The reading before, by `Character`s, with HTTP's optional white space (spaces, tabs) trimmed.
    static func reference(_ value: String) -> (scheme: String, credentials: String)? {
        let parts = value.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2 else { return nil }
        var credentials = Substring(parts[1])
        while let first = credentials.first, first == " " || first == "\t" { credentials = credentials.dropFirst() }
        while let last = credentials.last, last == " " || last == "\t" { credentials = credentials.dropLast() }
        return (String(parts[0]), String(credentials))
    }

    @Test("the same scheme and credentials as the split by characters, for every combination")
    func sameReadingAsBefore() {
        let leads = ["", " ", "   ", "\t"]
        let schemes = ["Bearer", "bearer", "BEARER", "DPoP", "Basic", "", "Béarer", "x"]
        let gaps = ["", " ", "  ", " \t", "\t"]
        let values = ["", "abc.def.ghi", "a b", "é", "x\t", " ", "\t"]
        let tails = ["", " ", "\t", " \t "]
        var compared = 0
        for lead in leads {
            for scheme in schemes {
                for gap in gaps {
                    for value in values {
                        for tail in tails {
                            let field = lead + scheme + gap + value + tail
                            let read = AuthorizationCredentials(field)
                            let expected = Self.reference(field)
                            #expect(read?.scheme == expected.map { Substring($0.scheme) }, "\(Array(field.utf8))")
                            #expect(read?.credentials == expected?.credentials, "\(Array(field.utf8))")
                            compared += 1
                        }
                    }
                }
            }
        }
        #expect(compared == 4 * 8 * 5 * 7 * 4)
    }

    @Test func schemesCompareWithoutASCIICase() throws {
        for (value, basic, bearer) in [
            ("Basic x", true, false), ("BASIC x", true, false), ("bAsIc x", true, false), ("Bearer x", false, true),
            ("Basics x", false, false), ("Basi x", false, false), ("Bașic x", false, false),
        ] {
            let field = try #require(AuthorizationCredentials(value))
            #expect(field.isScheme("basic") == basic && field.isScheme("bearer") == bearer, "\(value)")
        }
        #expect(AuthorizationCredentials("Bearer") == nil && AuthorizationCredentials("Bearer ") == nil)
        #expect(AuthorizationCredentials("Bearer  ")?.credentials == "")
    }
}
