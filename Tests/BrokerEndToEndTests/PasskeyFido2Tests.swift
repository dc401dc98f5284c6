import BrokerCore
import BrokerCrypto
import BrokerTestSupport
import BrokerTesting
import Foundation
import Testing

/// The broker's WebAuthn checks against an independent verifier, Yubico's python-fido2: the same ceremonies
/// (made by the tests' software authenticator with each algorithm) get the same verdict from both — accepted,
/// or refused for another origin, another relying-party id hash, a missing UP or UV flag, a bad signature, a
/// challenge that is not the one issued. A counter that went back is the relying party's storage's call:
/// python-fido2 leaves it to its caller, the broker refuses it.
@Suite("passkeys: the broker's verdicts against python-fido2's")
struct PasskeyFido2Tests {
    static let rp = WebAuthnRelyingParty(id: "localhost", origins: ["http://localhost:8787"])

    struct Case {
        var name: String
        var kind: String
        var challenge: [UInt8]
        var response: SoftAuthenticator.Response
        var registration: SoftAuthenticator.Response?
        var storedCounter: UInt32 = 0

        /// The broker's verdict.
        func broker() -> Bool {
            do {
                if kind == "register" {
                    _ = try PasskeyFido2Tests.rp.register(
                        clientDataJSON: response.clientDataJSON, attestationObject: response.attestationObject ?? [],
                        challenge: challenge, requireUserVerification: true)
                } else {
                    let object = try CBORReader.decode(registration?.attestationObject ?? [])
                    let data = try AuthenticatorData(object[text: "authData"]?.bytesValue ?? [])
                    guard let key = data.credential?.publicKey else { return false }
                    _ = try PasskeyFido2Tests.rp.authenticate(
                        clientDataJSON: response.clientDataJSON, authenticatorData: response.authenticatorData ?? [],
                        signature: response.signature ?? [], challenge: challenge, publicKey: key,
                        storedSignCount: storedCounter, requireUserVerification: true)
                }
                return true
            } catch {
                return false
            }
        }

        var json: JSONValue {
            var fields: [String: JSONValue] = [
                "kind": .string(kind), "challenge": .string(Base64URL.encode(challenge)), "credential": response.json,
            ]
            if let attestation = registration?.attestationObject {
                fields["attestation_object"] = .string(Base64URL.encode(attestation))
            }
            return .object(fields)
        }
    }

    static func cases(_ algorithm: COSEKey.Algorithm) throws -> [Case] {
        let good = SoftAuthenticator.Ceremony(origin: "http://localhost:8787", rpID: "localhost")
        let authenticator = try SoftAuthenticator(algorithm: algorithm, counter: 41)
        let challenge = try SecureRandom.bytes(32)
        let registration = try authenticator.register(challenge: challenge, userHandle: [7, 7], good)
        var cases = [
            Case(name: "registration", kind: "register", challenge: challenge, response: registration),
            Case(
                name: "packed self attestation", kind: "register", challenge: challenge,
                response: try authenticator.register(challenge: challenge, userHandle: [7], good, format: "packed")),
        ]
        func sign(_ name: String, _ edit: (inout SoftAuthenticator.Ceremony) -> Void, issued: [UInt8]? = nil) throws {
            var ceremony = good
            edit(&ceremony)
            let asked = try SecureRandom.bytes(32)
            cases.append(
                Case(
                    name: name, kind: "authenticate", challenge: issued ?? asked,
                    response: try authenticator.assert(challenge: asked, ceremony), registration: registration,
                    storedCounter: 42))
        }
        try sign("sign-in", { _ in })
        try sign("another origin", { $0.origin = "http://localhost:9999" })
        try sign("another rp id", { $0.rpID = "example.com" })
        try sign("UP missing", { $0.userPresent = false })
        try sign("UV missing", { $0.userVerified = false })
        try sign("a bad signature", { $0.corruptSignature = true })
        try sign("not the challenge issued", { _ in }, issued: try SecureRandom.bytes(32))
        try sign("a counter that went back", { $0.counter = 3 })
        var badRegistration = good
        badRegistration.origin = "https://evil.example"
        cases.append(
            Case(
                name: "registration from another origin", kind: "register", challenge: challenge,
                response: try authenticator.register(challenge: challenge, userHandle: [7], badRegistration)))
        var unpresent = good
        unpresent.userPresent = false
        cases.append(
            Case(
                name: "registration without UP", kind: "register", challenge: challenge,
                response: try authenticator.register(challenge: challenge, userHandle: [7], unpresent)))
        return cases
    }

    @Test(arguments: COSEKey.Algorithm.allCases)
    func bothVerifiersGiveTheSameVerdicts(algorithm: COSEKey.Algorithm) async throws {
        let cases = try Self.cases(algorithm)
        let input: JSONValue = [
            "rp_id": "localhost", "origin": "http://localhost:8787", "cases": .array(cases.map(\.json)),
        ]
        let result = try await ProcessRunner.run(
            "/usr/bin/env", ["python3", TestPaths.interop("fido2_check.py")], stdin: Array(input.serialized().utf8),
            timeout: .seconds(120))
        #expect(result.status == 0, "\(result.stderr)")
        let verdicts = try #require(JSONValue.parse(Array(result.stdout.utf8))?["verdicts"]?.arrayValue)
        #expect(verdicts.count == cases.count)
        for (testCase, verdict) in zip(cases, verdicts) {
            let fido2 = verdict["ok"]?.boolValue == true
            let broker = testCase.broker()
            switch testCase.name {
            case "registration", "packed self attestation", "sign-in":
                #expect(fido2 && broker, "\(testCase.name): fido2 \(verdict), broker \(broker)")
            case "a counter that went back":
                #expect(fido2 && !broker, "python-fido2 leaves counters to the relying party; the broker refuses")
            default:
                #expect(!fido2 && !broker, "\(testCase.name): fido2 \(verdict), broker \(broker)")
            }
        }
        // What python-fido2 read from the registration is what the broker read.
        let registered = try Self.rp.register(
            clientDataJSON: cases[0].response.clientDataJSON,
            attestationObject: try #require(cases[0].response.attestationObject), challenge: cases[0].challenge,
            requireUserVerification: true)
        #expect(verdicts[0]["credential_id"]?.stringValue == Base64URL.encode(registered.credentialID))
        #expect(verdicts[0]["algorithm"]?.intValue == Int64(algorithm.rawValue))
        #expect(verdicts[0]["sign_count"]?.intValue == Int64(registered.signCount))
        #expect(verdicts[0]["aaguid"]?.stringValue == registered.aaguid.map { String(format: "%02x", $0) }.joined())
    }
}
