/// Why a JWT was rejected: one case per reason, so that logs and error descriptions say exactly which
/// rule a token broke.
package enum JWTError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Over the size limit (16 KiB by default); rejected before any parsing.
    case tooLarge(Int)
    /// Not three base64url segments, or a segment that is not strict base64url.
    case malformed(String)
    /// The protected header is not a JSON object, or a member has the wrong type.
    case invalidHeader(String)
    /// `alg: none` in any spelling.
    case algorithmNone
    /// An algorithm the broker never accepts (the `HS*` family, anything unknown).
    case algorithmNotAllowed(String)
    /// The header's `alg` is not the one algorithm bound to the selected key.
    case algorithmMismatch(header: String, key: String)
    /// The `kid` names no key we know.
    case unknownKeyID(String)
    /// No `kid`, and more than one key could have signed.
    case missingKeyID
    /// `crit` lists extensions this verifier does not understand (RFC 7515 §4.1.11).
    case unsupportedCritical([String])
    /// The `typ` header is not the expected one (e.g. `at+jwt`, RFC 9068 §4).
    case unexpectedType(String?)
    /// The signature does not verify under the selected key.
    case invalidSignature
    /// The payload is not a JSON object.
    case invalidPayload(String)
    /// A claim has the wrong type (e.g. a string `exp`).
    case invalidClaim(String)
    /// A required claim is absent.
    case missingClaim(String)
    /// `exp` is in the past (beyond the leeway).
    case expired
    /// `nbf` is in the future (beyond the leeway).
    case notYetValid
    /// `iat` is in the future (beyond the leeway).
    case issuedInFuture
    /// The token is older than the accepted age.
    case tooOld
    /// `iss` is not the expected issuer.
    case issuerMismatch(String?)
    /// `aud` does not contain the expected audience.
    case audienceMismatch

    package var description: String {
        switch self {
        case .tooLarge(let size): "token too large (\(size) bytes)"
        case .malformed(let why): "malformed token: \(why)"
        case .invalidHeader(let why): "invalid header: \(why)"
        case .algorithmNone: "alg none is not accepted"
        case .algorithmNotAllowed(let alg): "algorithm \(alg) is not accepted"
        case .algorithmMismatch(let header, let key): "header alg \(header) does not match the key's \(key)"
        case .unknownKeyID(let kid): "unknown kid \(kid.prefix(64))"
        case .missingKeyID: "no kid and several candidate keys"
        case .unsupportedCritical(let names): "unsupported critical header parameters: \(names.joined(separator: ", "))"
        case .unexpectedType(let typ): "unexpected typ \(typ ?? "(none)")"
        case .invalidSignature: "signature does not verify"
        case .invalidPayload(let why): "invalid payload: \(why)"
        case .invalidClaim(let name): "invalid claim \(name)"
        case .missingClaim(let name): "missing claim \(name)"
        case .expired: "token expired"
        case .notYetValid: "token not yet valid"
        case .issuedInFuture: "token issued in the future"
        case .tooOld: "token too old"
        case .issuerMismatch(let iss): "unexpected issuer \(iss.map { String($0.prefix(200)) } ?? "(none)")"
        case .audienceMismatch: "audience mismatch"
        }
    }
}
