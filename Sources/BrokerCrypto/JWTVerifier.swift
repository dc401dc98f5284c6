package import BrokerCore
import Glibc

/// The keys a verifier trusts, each under its `kid` and bound to its one algorithm.
///
/// The collection is the algorithm allow-list: a token can only ever be checked with the algorithm its key
/// was registered for, whatever its header says.
package struct JWTKeySet: Sendable {
    package private(set) var keys: [String: AsymmetricKey] = [:]

    package init() {}

    package init(jwks: JWKSet) throws {
        for jwk in jwks.keys {
            guard let key = try? AsymmetricKey(jwk: jwk.publicOnly) else { continue }
            try add(key, kid: jwk.kid ?? key.thumbprint())
        }
    }

    /// Adds the public half of `key` under `kid` (its thumbprint when `nil`).
    package mutating func add(_ key: AsymmetricKey, kid: String? = nil) throws {
        let publicKey = try key.publicKey()
        keys[try kid ?? publicKey.thumbprint()] = publicKey
    }

    package var isEmpty: Bool { keys.isEmpty }
}

/// A JWT whose signature and claims have been checked.
package struct VerifiedJWT: Sendable {
    package let header: [String: JSONValue]
    package let claims: [String: JSONValue]
    /// The `kid` of the key that verified it.
    package let kid: String
    package let algorithm: JWSAlgorithm

    package var subject: String? { claims["sub"]?.stringValue }
    package var issuer: String? { claims["iss"]?.stringValue }
    package var expiresAt: Int64? { claims["exp"]?.intValue }
    package var issuedAt: Int64? { claims["iat"]?.intValue }
    package var jwtID: String? { claims["jti"]?.stringValue }

    package subscript(claim: String) -> JSONValue? { claims[claim] }
}

/// A strict JWT verifier (RFC 7519, RFC 8725).
///
/// The algorithm comes from the key, never from the header; `none`, `HS*`, unknown `crit` and unknown `kid`s
/// are refused; `exp`, `nbf` and `iat` are checked with a leeway, and `iss`/`aud`/`typ` when configured.
package struct JWTVerifier: Sendable {
    package struct Options: Sendable {
        /// The required `iss`, or `nil` to accept any.
        package var issuer: String?
        /// An audience that `aud` must contain, or `nil` to accept any.
        package var audience: String?
        /// Clock skew tolerated on `exp`, `nbf` and `iat`, in seconds.
        package var leeway: Int64 = 60
        /// Largest accepted compact token, in bytes.
        package var maxTokenSize = 16 * 1024
        /// Whether `exp` must be present.
        package var requireExpiry = true
        /// Required claims besides `exp`.
        package var requiredClaims: Set<String> = []
        /// The required `typ` header (compared case-insensitively, with an optional `application/` prefix).
        package var expectedType: String?
        /// Oldest accepted `iat`, as an age in seconds; `nil` for no limit.
        package var maxAge: Int64?

        package init(
            issuer: String? = nil, audience: String? = nil, leeway: Int64 = 60, expectedType: String? = nil
        ) {
            self.issuer = issuer
            self.audience = audience
            self.leeway = leeway
            self.expectedType = expectedType
        }
    }

    package var keys: JWTKeySet
    package var options: Options

    package init(keys: JWTKeySet, options: Options = Options()) {
        self.keys = keys
        self.options = options
    }

    /// Verifies a compact JWT at time `now` (seconds since 1970).
    ///
    /// - Throws: ``JWTError``, one case per reason.
    package func verify(_ token: String, now: Int64) throws(JWTError) -> VerifiedJWT {
        let jws = try verifySignature(token)
        guard let claims = JSONValue.parse(jws.payload)?.objectValue else {
            throw .invalidPayload("not a JSON object")
        }
        try check(claims: claims, now: now)
        return VerifiedJWT(header: jws.header, claims: claims, kid: jws.kid, algorithm: jws.algorithm)
    }

    /// A JWS whose signature verified; the payload is not interpreted.
    package struct VerifiedJWS: Sendable {
        package let header: [String: JSONValue]
        package let payload: [UInt8]
        package let kid: String
        package let algorithm: JWSAlgorithm
    }

    /// The number of segments when a token does not have three.
    package struct SegmentCount: Error {
        package let segments: Int
    }

    /// A compact JWS's three segments (RFC 7515 §7.1), found with `memchr`: splitting the token's bytes through
    /// the standard library's generic `split` looked at each byte in turn, ~5,300 instructions of each
    /// `GET /auth/me` (a 600-byte token) under callgrind.
    package static func segments(_ bytes: [UInt8]) -> Result<[ArraySlice<UInt8>], SegmentCount> {
        bytes.withUnsafeBufferPointer { buffer in
            // The first two dots' positions and how many there are in all.
            var first = 0
            var second = 0
            var dots = 0
            var from = 0
            while from < buffer.count, let base = buffer.baseAddress,
                let found = memchr(base + from, Int32(UInt8(ascii: ".")), buffer.count - from)
            {
                let index = base.distance(to: found.assumingMemoryBound(to: UInt8.self))
                if dots == 0 { first = index } else if dots == 1 { second = index }
                dots += 1
                from = index + 1
            }
            guard dots == 2 else { return .failure(SegmentCount(segments: dots + 1)) }
            return .success([bytes[..<first], bytes[(first + 1)..<second], bytes[(second + 1)...]])
        }
    }

    /// Checks the structure, header and signature of a compact JWS, without looking at the payload.
    ///
    /// - Throws: ``JWTError``, one case per reason.
    package func verifySignature(_ token: String) throws(JWTError) -> VerifiedJWS {
        let bytes = Array(token.utf8)
        guard bytes.count <= options.maxTokenSize else { throw .tooLarge(bytes.count) }
        let parts: [ArraySlice<UInt8>]
        switch JWTVerifier.segments(bytes) {
        case .success(let found): parts = found
        case .failure(let count): throw .malformed("expected 3 segments, found \(count.segments)")
        }
        guard !parts[0].isEmpty else { throw .malformed("empty header") }
        guard let headerBytes = Base64URL.decode(parts[0]) else { throw .malformed("header is not base64url") }
        guard let header = JSONValue.parse(headerBytes)?.objectValue else {
            throw .invalidHeader("not a JSON object")
        }
        guard let alg = header["alg"]?.stringValue else { throw .invalidHeader("alg missing or not a string") }
        // Named before the empty signature it comes with, so that logs say what was attempted.
        if alg.lowercased() == "none" { throw .algorithmNone }
        guard !parts[2].isEmpty else { throw .malformed("empty signature") }
        guard let payload = Base64URL.decode(parts[1]) else { throw .malformed("payload is not base64url") }
        guard let signature = Base64URL.decode(parts[2]) else { throw .malformed("signature is not base64url") }
        guard let headerAlgorithm = JWSAlgorithm(rawValue: alg) else { throw .algorithmNotAllowed(alg) }

        if let crit = header["crit"] {
            // We understand no extension, so any critical one makes the token unusable (RFC 7515 §4.1.11).
            let names = crit.arrayValue?.compactMap(\.stringValue) ?? ["(malformed)"]
            throw .unsupportedCritical(names.isEmpty ? ["(empty)"] : names)
        }

        if let expected = options.expectedType {
            let typ = header["typ"]?.stringValue
            guard let typ, JWTVerifier.normalizeType(typ) == JWTVerifier.normalizeType(expected) else {
                throw .unexpectedType(header["typ"]?.stringValue)
            }
        }

        let kid: String
        let key: AsymmetricKey
        switch header["kid"] {
        case .some(.string(let named)):
            guard let found = keys.keys[named] else { throw .unknownKeyID(named) }
            kid = named
            key = found
        case .some:
            throw .invalidHeader("kid is not a string")
        case .none:
            guard keys.keys.count == 1, let only = keys.keys.first else { throw .missingKeyID }
            kid = only.key
            key = only.value
        }
        guard headerAlgorithm == key.algorithm else {
            throw .algorithmMismatch(header: alg, key: key.algorithm.rawValue)
        }

        let signingInput = bytes[..<(parts[0].count + 1 + parts[1].count)]
        guard key.verify(signature: signature, message: signingInput) else { throw .invalidSignature }
        return VerifiedJWS(header: header, payload: payload, kid: kid, algorithm: key.algorithm)
    }

    /// The claims checks of ``verify(_:now:)`` alone, for a token whose signature was checked another way (an
    /// HMAC under a client's secret, which no key set holds).
    package func check(claims: [String: JSONValue], now: Int64) throws(JWTError) {
        for name in options.requiredClaims where claims[name] == nil { throw .missingClaim(name) }

        func numericDate(_ name: String) throws(JWTError) -> Int64? {
            guard let value = claims[name] else { return nil }
            guard let seconds = value.intValue else { throw .invalidClaim(name) }
            return seconds
        }
        let exp = try numericDate("exp")
        let nbf = try numericDate("nbf")
        let iat = try numericDate("iat")
        if let exp {
            // "The processing of the exp claim requires that the current date/time MUST be before the
            // expiration date/time listed in the exp claim" (RFC 7519 §4.1.4).
            guard now < exp &+ options.leeway else { throw .expired }
        } else if options.requireExpiry {
            throw .missingClaim("exp")
        }
        if let nbf, now &+ options.leeway < nbf { throw .notYetValid }
        if let iat, iat > now &+ options.leeway { throw .issuedInFuture }
        if let maxAge = options.maxAge {
            guard let iat else { throw .missingClaim("iat") }
            // Checked arithmetic: with `iat` near Int64.min a wrapping subtraction made any age look young.
            let (age, overflow) = now.subtractingReportingOverflow(iat)
            guard !overflow, age <= maxAge &+ options.leeway else { throw .tooOld }
        }

        if let issuer = options.issuer {
            guard let iss = claims["iss"] else { throw .issuerMismatch(nil) }
            guard let text = iss.stringValue else { throw .invalidClaim("iss") }
            guard text == issuer else { throw .issuerMismatch(text) }
        }
        if let audience = options.audience {
            switch claims["aud"] {
            case .some(.string(let aud)):
                guard aud == audience else { throw .audienceMismatch }
            case .some(.array(let values)):
                guard values.allSatisfy({ $0.stringValue != nil }) else { throw .invalidClaim("aud") }
                guard values.contains(.string(audience)) else { throw .audienceMismatch }
            case .some:
                throw .invalidClaim("aud")
            case .none:
                throw .audienceMismatch
            }
        }
        if let sub = claims["sub"], sub.stringValue == nil { throw .invalidClaim("sub") }
    }

    private static func normalizeType(_ typ: String) -> String {
        let lower = typ.lowercased()
        return lower.hasPrefix("application/") ? String(lower.dropFirst("application/".count)) : lower
    }
}
