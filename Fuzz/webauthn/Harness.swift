import BrokerCore
import BrokerCrypto
import FuzzSupport

/// The WebAuthn readers: CBOR, authenticator data (with its attested credential's COSE key) and attestation
/// objects through the whole registration check. The first byte picks the reader.
/// Properties: a CBOR item that reads encodes to bytes that read back as the same item; authenticator data that
/// reads holds a credential whose stored key bytes read back as the same algorithm; no input crashes.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzWebAuthn(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = fuzzInput(data, size)
    guard let mode = input.first else { return 0 }
    let rest = Array(input.dropFirst())
    switch mode % 3 {
    case 0:
        guard let item = try? CBORReader.decode(rest) else { return 0 }
        let again = try? CBORReader.decode(item.encoded)
        require(again == item, "a CBOR item does not survive encoding and reading")
    case 1:
        guard let parsed = try? AuthenticatorData(rest) else { return 0 }
        if let credential = parsed.credential {
            let stored = try? COSEKey(encoded: credential.publicKey.encoded)
            require(stored?.algorithm == credential.publicKey.algorithm, "a credential's stored key does not read back")
            _ = credential.publicKey.verify(signature: Array(rest.prefix(72)), message: rest)
        }
    default:
        // A registration whose client data is right: everything else comes from the input.
        let rp = WebAuthnRelyingParty(id: "localhost", origins: ["http://localhost:8787"])
        let clientData = Array(
            #"{"type":"webauthn.create","challenge":"AQID","origin":"http://localhost:8787"}"#.utf8)
        _ = try? rp.register(
            clientDataJSON: clientData, attestationObject: rest, challenge: [1, 2, 3], requireUserVerification: false)
    }
    return 0
}
