import BrokerCore
import BrokerCrypto
import BrokerTesting
import Foundation
import Testing

@Suite("scrypt password hashes")
struct PasswordHasherTests {
    /// A cheap cost for round-trip tests; the default cost has its own test.
    let fast = PasswordHasher(parameters: .init(logN: 10, r: 8, p: 1))

    @Test("RFC 7914 §12 test vector through OpenSSL")
    func rfc7914() throws {
        let derived = try PasswordHasher.scrypt(
            password: Array("password".utf8), salt: Array("NaCl".utf8), parameters: .init(logN: 10, r: 8, p: 16),
            length: 64)
        #expect(
            derived.hexString
                == "fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b3731622eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640"
        )
    }

    @Test func defaultIsAtLeastOWASP() throws {
        let hasher = PasswordHasher()
        #expect(hasher.parameters.logN >= 17 && hasher.parameters.r >= 8 && hasher.parameters.p >= 1)
        let stored = try hasher.hash(Secret("correct horse battery staple"))
        #expect(stored.hasPrefix("$scrypt$ln=17,r=8,p=1$"))
        #expect(try hasher.verify(Secret("correct horse battery staple"), against: stored))
    }

    @Test func roundTripAndWrongPassword() throws {
        let stored = try fast.hash(Secret("hunter2hunter2"))
        #expect(try fast.verify(Secret("hunter2hunter2"), against: stored))
        #expect(try !fast.verify(Secret("hunter2hunter3"), against: stored))
        #expect(try !fast.verify(Secret(""), against: stored))
        #expect(try fast.hash(Secret("hunter2hunter2")) != stored, "salted")
    }

    @Test func needsRehashWhenWeaker() throws {
        let weak = try fast.hash(Secret("pw-pw-pw-pw"))
        #expect(PasswordHasher().needsRehash(weak))
        #expect(!fast.needsRehash(weak))
        #expect(PasswordHasher().needsRehash("garbage"))
    }

    @Test(
        "hostile parameters are refused before hashing",
        arguments: [
            "$scrypt$ln=30,r=8,p=1$c2FsdHNhbHRzYWx0$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA",
            "$scrypt$ln=20,r=32,p=1$c2FsdHNhbHRzYWx0$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA",
            "$scrypt$ln=17,r=8,p=999$c2FsdHNhbHRzYWx0$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA",
            "$scrypt$ln=0,r=8,p=1$c2FsdHNhbHRzYWx0$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA",
        ])
    func hostileParameters(_ stored: String) throws {
        #expect {
            try fast.verify(Secret("x"), against: stored)
        } throws: { error in
            guard case .parametersOutOfBounds = error as? PasswordHasher.VerifyError else { return false }
            return true
        }
    }

    @Test(
        "malformed stored hashes",
        arguments: [
            "", "$scrypt$", "$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaA", "$scrypt$ln=17,r=8$c2FsdHNhbHQ$aGFzaA",
            "$scrypt$ln=17,r=8,p=1$!!!$aGFzaGhhc2hoYXNoaGFzaA", "$scrypt$ln=17,r=8,p=1$c2FsdHNhbHQ$",
            "$scrypt$ln=1e3,r=8,p=1$c2FsdHNhbHRzYWx0$aGFzaGhhc2hoYXNoaGFzaA",
        ])
    func malformed(_ stored: String) {
        #expect(throws: PasswordHasher.VerifyError.malformedHash) {
            try fast.verify(Secret("x"), against: stored)
        }
    }
}
