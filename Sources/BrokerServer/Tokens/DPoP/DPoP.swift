import BrokerCore
import BrokerCrypto
import BrokerStore
import Foundation

/// DPoP (RFC 9449, issue "Logout everywhere…" item 5): tokens bound to a key the client holds.
///
/// A client sends a proof — a JWT signed by its key, with the public key in the header — with each request.
/// At the token endpoint a proof binds what is issued: the access token carries `cnf.jkt` (the key's RFC 7638
/// thumbprint) and, for public clients (the broker CLI, native apps), the session records the thumbprint so
/// that its refresh token is refused without a proof by the same key. Where a bound access token is presented
/// (`/auth/me`, `/auth/userinfo`) the proof must cover the method, the URL and the token (`ath`), be fresh
/// (`iat`), unseen (`jti`, remembered in the store — once the request is accepted — so that another broker
/// refuses a replay too) and, when the
/// server asks for one (`server.dpop_nonce`), carry the server's nonce.
struct DPoPChecker: Sendable {
    let store: any Store
    /// Derives nonces (stateless: any broker with the same flow key accepts another's); keyed once, as the
    /// client-secret hasher's key is, since every DPoP request computes one.
    let nonceKey: HMACKey
    let requireNonce: Bool
    /// The keys of recent proofs' headers (``ProofKeys``).
    let proofKeys = ProofKeys()

    init(store: any Store, nonceKey: [UInt8], requireNonce: Bool) {
        self.store = store
        self.nonceKey = HMACKey(.sha256, key: nonceKey)
        self.requireNonce = requireNonce
    }

    /// The algorithms proofs may be signed with: those our OpenSSL code verifies.
    static let algorithms = ["ES256", "EdDSA", "RS256"]
    /// A proof's `iat` may be this old…
    static let maxAge: Int64 = 300
    /// …or this far ahead of the broker's clock.
    static let leeway: Int64 = 30
    /// A nonce is good for the window it was made in and the next one.
    static let nonceWindow: Int64 = 300
    static let header = "DPoP"

    /// What a good proof established.
    struct Proof: Sendable, Equatable {
        /// The RFC 7638 thumbprint of the proof's key.
        var thumbprint: String
        /// The replay marker of its `jti`, and until when it must be remembered: written by ``spend(_:)`` once
        /// the request the proof protects is accepted (RT3-8), so that a request refused anyway writes nothing.
        var marker: String
        var rememberUntil: Int64
    }

    /// Why a proof was refused: an error for the client, and a fresh nonce when that is what it lacked.
    struct Refusal: Error, Sendable {
        var code: OAuthErrorCode
        var detail: String
        var nonce: String?

        static func invalid(_ detail: String) -> Refusal {
            Refusal(code: .invalidDPoPProof, detail: detail, nonce: nil)
        }
    }

    /// Checks one `DPoP` header value (`values`: every `DPoP` field of the request; exactly one is allowed) for a
    /// request of `method` to `url`; `accessToken` when one is presented with it (its hash must be `ath`).
    func check(_ values: [String], method: String, url: String, accessToken: String?, now: Int64) async throws(Refusal)
        -> Proof
    {
        guard values.count == 1, let proof = values.first, !proof.isEmpty else {
            throw .invalid(values.isEmpty ? "a DPoP proof is required" : "exactly one DPoP header is allowed")
        }
        guard proof.utf8.count <= 8 * 1024 else { throw .invalid("the DPoP proof is too large") }
        guard let dot = proof.firstIndex(of: ".") else { throw .invalid("the DPoP proof is not a JWT") }
        let key = try proofKeys.entry(header: String(proof[..<dot])) { () throws(Refusal) in
            try Self.headerKey(proof)
        }
        let thumbprint = key.thumbprint
        // `iat` is checked below, where a nonce can stand in for a clock that differs from the broker's.
        var options = JWTVerifier.Options(leeway: 10 * 366 * 86_400, expectedType: "dpop+jwt")
        options.requireExpiry = false
        options.requiredClaims = ["jti", "htm", "htu", "iat"]
        options.maxTokenSize = 8 * 1024
        let verified: VerifiedJWT
        do {
            verified = try JWTVerifier(keys: key.keys, options: options).verify(proof, now: now)
        } catch {
            throw .invalid("the DPoP proof does not verify: \(error)")
        }
        guard let jti = verified["jti"]?.stringValue, (1...256).contains(jti.utf8.count) else {
            throw .invalid("the DPoP proof's jti is missing or too long")
        }
        guard verified["htm"]?.stringValue == method else {
            throw .invalid("the DPoP proof is for another method (htm)")
        }
        // The same text is the same URL; only a differently written one is normalized to be compared (Foundation's
        // URL parsing, twice, on every DPoP-bound request otherwise).
        guard let htu = verified["htu"]?.stringValue,
            htu == url || (Self.normalized(htu).map { $0 == Self.normalized(url) } ?? false)
        else {
            // Most often a client that reaches the broker by another address than its issuer (a node's own
            // address, an internal alias): proofs name the issuer's URL, so say which one, and what to set.
            let named = verified["htu"]?.stringValue.map { VisibleText.escape(String($0.prefix(200))) } ?? "nothing"
            throw .invalid(
                "the DPoP proof is for another URL (htu): it names \(named), and this broker checks proofs against "
                    + "its issuer's URL, \(url); set the client's broker_url (BROKER_URL) to the issuer's URL, or "
                    + "server.issuer to the URL clients use")
        }
        if let accessToken {
            let expected = Base64URL.encode(Digest.sha256(accessToken))
            guard let ath = verified["ath"]?.stringValue, ConstantTime.equals(ath, expected) else {
                throw .invalid("the DPoP proof does not name this access token (ath)")
            }
        }
        // Freshness: the broker's nonce (RFC 9449 §8) when the proof carries one, else `iat` within the window.
        // A client whose clock is off is given a nonce rather than refused (§11.1), so a laptop with a wrong
        // clock still signs in, one round trip later.
        let nonceIsCurrent = verified["nonce"]?.stringValue.map { isCurrent(nonce: $0, now: now) } ?? false
        if requireNonce && !nonceIsCurrent {
            throw Refusal(
                code: .useDPoPNonce, detail: "the DPoP proof must carry the server's nonce",
                nonce: self.nonce(now: now))
        }
        if !nonceIsCurrent {
            // Checked arithmetic: an `iat` near Int64.min would overflow `now - iat` (a trap: the broker would stop).
            let age = verified.issuedAt.map { now.subtractingReportingOverflow($0) }
            guard let age, !age.overflow, age.partialValue >= -Self.leeway, age.partialValue <= Self.maxAge else {
                throw Refusal(
                    code: .useDPoPNonce,
                    detail: "the DPoP proof's iat is outside the broker's window (is the clock right?): send the nonce",
                    nonce: self.nonce(now: now))
            }
        }
        // Seen anywhere before (any broker of this store): a replay. Only read here; ``spend(_:)`` writes it.
        let marker = "dpop:" + Base64URL.encode(Digest.sha256(thumbprint + " " + jti))
        let seen: Bool
        do {
            seen = try await store.isStateMarkerSpent(marker)
        } catch {
            throw Refusal(code: .serverError, detail: "the DPoP proof cannot be checked now", nonce: nil)
        }
        guard !seen else { throw .invalid("the DPoP proof was used before (jti)") }
        // Remembered for as long as the proof could pass: its iat window, or two nonce windows.
        return Proof(
            thumbprint: thumbprint, marker: marker,
            rememberUntil: now + max(Self.maxAge + Self.leeway, 2 * Self.nonceWindow))
    }

    /// What a proof's header says, checked: its key (for the verifier, under the header's `kid` or the key's
    /// thumbprint) and the key's thumbprint. The same header always gives the same answer (``ProofKeys``).
    static func headerKey(_ proof: String) throws(Refusal) -> ProofKeys.Entry {
        let segments = proof.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, let headerBytes = Base64URL.decode(segments[0]),
            let header = JSONValue.parse(headerBytes)?.objectValue
        else { throw .invalid("the DPoP proof is not a JWT") }
        guard let alg = header["alg"]?.stringValue, Self.algorithms.contains(alg) else {
            throw .invalid("the DPoP proof's alg must be one of \(Self.algorithms.joined(separator: ", "))")
        }
        guard let jwkValue = header["jwk"], case .object = jwkValue,
            let jwk = try? JSONDecoder().decode(JWK.self, from: Data(jwkValue.serialized().utf8))
        else { throw .invalid("the DPoP proof's header has no jwk") }
        guard !jwk.hasPrivateMembers else { throw .invalid("the DPoP proof's jwk holds a private key") }
        let key: AsymmetricKey
        let thumbprint: String
        do {
            key = try AsymmetricKey(jwk: jwk)
            thumbprint = try key.thumbprint()
        } catch {
            throw .invalid("the DPoP proof's jwk is not a usable public key")
        }
        guard key.algorithm.rawValue == alg else { throw .invalid("the DPoP proof's alg does not fit its key") }
        var keys = JWTKeySet()
        do {
            try keys.add(key, kid: header["kid"]?.stringValue ?? thumbprint)
        } catch {
            throw .invalid("the DPoP proof's jwk is not a usable public key")
        }
        return ProofKeys.Entry(keys: keys, thumbprint: thumbprint)
    }

    /// Records `proof`'s `jti` as used, once the request it protects has been accepted: a proof presented twice
    /// at the same moment is refused the second time here (the store decides, for every broker on it).
    func spend(_ proof: Proof) async throws(Refusal) {
        let fresh: Bool
        do {
            fresh = try await store.spendStateMarker(proof.marker, expiresAt: proof.rememberUntil)
        } catch {
            throw Refusal(code: .serverError, detail: "the DPoP proof cannot be checked now", nonce: nil)
        }
        guard fresh else { throw .invalid("the DPoP proof was used before (jti)") }
    }

    /// The URL as RFC 9449 §4.3 compares it: no query or fragment, scheme and host in lower case, no default port.
    static func normalized(_ text: String) -> String? {
        guard var parts = URLComponents(string: text), let scheme = parts.scheme?.lowercased(),
            let host = parts.host?.lowercased(), scheme == "https" || scheme == "http"
        else { return nil }
        parts.query = nil
        parts.fragment = nil
        parts.user = nil
        parts.password = nil
        parts.scheme = scheme
        parts.host = host
        if (scheme == "https" && parts.port == 443) || (scheme == "http" && parts.port == 80) { parts.port = nil }
        if parts.path.isEmpty { parts.path = "/" }
        return parts.string
    }

    /// A nonce for now: the window's number and its MAC.
    func nonce(now: Int64) -> String {
        let window = now / Self.nonceWindow
        return Base64URL.encode(Self.bytes(window) + mac(window))
    }

    private func isCurrent(nonce: String, now: Int64) -> Bool {
        guard let bytes = Base64URL.decode(nonce), bytes.count == 24 else { return false }
        let window = bytes.prefix(8).reduce(Int64(0)) { $0 << 8 | Int64($1) }
        let current = now / Self.nonceWindow
        guard window == current || window == current - 1 else { return false }
        return ConstantTime.equals(Array(bytes.suffix(16)), mac(window))
    }

    private func mac(_ window: Int64) -> [UInt8] {
        Array(nonceKey.authenticate(Array("dpop-nonce ".utf8) + Self.bytes(window)).prefix(16))
    }

    private static func bytes(_ value: Int64) -> [UInt8] {
        (0..<8).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) }
    }
}

/// The key a token request proved possession of, for the tokens it issues (set by the token endpoint for the
/// duration of the grant): access tokens minted inside carry `cnf.jkt`, and a public client's new session is
/// bound to it. A task-local so that no access token minted under a proof can miss it, whichever grant mints it.
enum DPoPBinding {
    struct Key: Sendable {
        var thumbprint: String
        /// Whether a session started now is bound too (public clients: the refresh token is only usable with
        /// the key; a confidential client's refresh token is bound by its secret instead).
        var bindsSession: Bool
    }

    @TaskLocal static var current: Key?
}

/// What a request brings for DPoP: its `DPoP` header fields, method and path (the URL is the issuer's + path).
struct DPoPRequest: Sendable {
    var proofs: [String]
    var method: String
    var path: String

    /// The request being handled, when it carries a `DPoP` header (set by ``ErrorAndLogMiddleware``).
    @TaskLocal static var current: DPoPRequest?
}

extension DPoPChecker.Refusal {
    /// The refusal at the token endpoint (RFC 9449 §5): 400, with a fresh nonce when that was the problem.
    var tokenEndpointError: APIError {
        if code == .serverError { return .serverError }
        return APIError(status: 400, code: code, detail: detail, headers: nonce.map { [("DPoP-Nonce", $0)] } ?? [])
    }

    /// The refusal at a protected resource (RFC 9449 §7.1): 401 with a `DPoP` challenge.
    var resourceError: APIError {
        if code == .serverError { return .serverError }
        var headers = [("WWW-Authenticate", DPoPChecker.challenge(error: code, detail: detail))]
        if let nonce { headers.append(("DPoP-Nonce", nonce)) }
        return APIError(status: 401, code: code, detail: detail, headers: headers)
    }
}

extension DPoPChecker {
    /// A `WWW-Authenticate: DPoP …` challenge naming the algorithms proofs may use.
    static func challenge(error: OAuthErrorCode, detail: String) -> String {
        let quoted = detail.replacingOccurrences(of: "\\", with: "").replacingOccurrences(of: "\"", with: "'")
        return "DPoP algs=\"\(algorithms.joined(separator: " "))\", error=\"\(error)\", error_description=\"\(quoted)\""
    }
}

extension TokenIssuer {
    /// How a token was presented: `Authorization: Bearer <token>` or `Authorization: DPoP <token>`.
    enum Presentation: Sendable {
        case bearer
        case dpop
    }

    /// The token of an `Authorization` header and its scheme (`Bearer` or `DPoP`).
    static func presented(_ authorization: String?) throws -> (token: String, scheme: Presentation) {
        guard let authorization else {
            throw APIError.invalidToken("an Authorization: Bearer (or DPoP) access token is required")
        }
        guard let field = AuthorizationCredentials(authorization) else {
            throw APIError.invalidToken("the Authorization header must be \"Bearer <access token>\"")
        }
        if field.isScheme("bearer") { return (field.credentials, .bearer) }
        if field.isScheme("dpop") { return (field.credentials, .dpop) }
        throw APIError.invalidToken("the Authorization header must be \"Bearer <access token>\"")
    }

    /// RFC 9449 §7: a token bound to a key (`cnf.jkt`) is only good as `DPoP` with a proof by that key for this
    /// request (``DPoPRequest/current``); an unbound one only as `Bearer`.
    nonisolated(nonsending) func checkBinding(_ verified: VerifiedJWT, token: String, scheme: Presentation) async throws
    {
        let bound = verified["cnf"]?["jkt"]?.stringValue
        switch (bound, scheme) {
        case (nil, .bearer):
            return
        case (nil, .dpop):
            throw APIError(
                status: 401, code: .invalidToken, detail: "the access token is not DPoP-bound: send it as Bearer",
                headers: [("WWW-Authenticate", "Bearer error=\"invalid_token\"")])
        case (.some, .bearer):
            throw APIError(
                status: 401, code: .invalidToken,
                detail: "the access token is bound to a DPoP key: send it as \"Authorization: DPoP\" with a proof",
                headers: [
                    (
                        "WWW-Authenticate",
                        DPoPChecker.challenge(error: .invalidToken, detail: "DPoP-bound token sent as Bearer")
                    )
                ])
        case (let jkt?, .dpop):
            guard let request = DPoPRequest.current else {
                throw DPoPChecker.Refusal.invalid("a DPoP proof is required").resourceError
            }
            let proof: DPoPChecker.Proof
            do {
                proof = try await dpop.check(
                    request.proofs, method: request.method, url: issuer + request.path, accessToken: token, now: now)
            } catch {
                throw error.resourceError
            }
            guard ConstantTime.equals(proof.thumbprint, jkt) else {
                throw DPoPChecker.Refusal.invalid("the DPoP proof is made with another key than the token's")
                    .resourceError
            }
            // A proof by the token's own key, for this request: only now is its jti written (RT3-8).
            do {
                try await dpop.spend(proof)
            } catch {
                throw error.resourceError
            }
        }
    }
}
