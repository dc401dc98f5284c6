import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// DPoP (RFC 9449) in process: a proof at the token endpoint binds the access token (`cnf.jkt`) and a public
/// client's refresh token to the proof's key; `/auth/me` and `/auth/userinfo` then want `Authorization: DPoP`
/// with a fresh proof for this method, URL and token, by that key, never seen before — and refuse the token
/// as Bearer. Each refusal is one of the conformance cases RFC 9449 §4.3 lists.
@Suite("DPoP: tokens bound to the client's key")
struct DPoPTests {
    typealias Reply = InProcessBroker.Client.Reply
    static let issuer = "http://broker.test"
    static let password = "correct horse battery staple"
    static let dpop: HTTPField.Name = {
        guard let name = HTTPField.Name("DPoP") else { preconditionFailure("DPoP is a field name") }
        return name
    }()

    static func proof(
        _ key: AsymmetricKey, _ method: String, _ path: String, token: String? = nil, nonce: String? = nil,
        at now: Int64
    ) throws -> String {
        try DPoPProof.make(key: key, method: method, url: issuer + path, accessToken: token, nonce: nonce, now: now)
    }

    /// `/auth/login` (the CLI's password sign-in) with a proof.
    static func login(_ client: InProcessBroker.Client, _ email: String, proof: String?) async throws -> Reply {
        var headers: HTTPFields = [.contentType: "application/json"]
        if let proof { headers[dpop] = proof }
        let body: JSONValue = ["email": .string(email), "password": .string(password)]
        return try await client.send(.post, "/auth/login", headers: headers, body: body.serializedBytes)
    }

    static func me(_ client: InProcessBroker.Client, _ token: String, scheme: String = "DPoP", proof: String?)
        async throws -> Reply
    {
        var headers: HTTPFields = [.authorization: "\(scheme) \(token)"]
        if let proof { headers[dpop] = proof }
        return try await client.send(.get, "/auth/me", headers: headers)
    }

    static func refresh(_ client: InProcessBroker.Client, _ token: String, proof: String?) async throws -> Reply {
        var headers: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
        if let proof { headers[dpop] = proof }
        return try await client.send(
            .post, "/auth/token", headers: headers,
            body: Array(
                FormEncoding.encode([
                    ("grant_type", "refresh_token"), ("refresh_token", token), ("client_id", "broker-cli"),
                ]).utf8))
    }

    /// `proof` with its header replaced by `donor`'s (the signature no longer fits the header's key).
    static func swappedHeader(of donor: String, onto proof: String) throws -> String {
        let header = try #require(donor.split(separator: ".").first)
        let rest = proof.split(separator: ".", omittingEmptySubsequences: false).dropFirst()
        return ([header] + rest).joined(separator: ".")
    }

    @Test func aBoundTokenNeedsAFreshProofByItsKeyForThisRequest() async throws {
        let broker = try await InProcessBroker()
        let key = try AsymmetricKey.generate(.ecP256)
        let other = try AsymmetricKey.generate(.ed25519)
        let thumbprint = try key.thumbprint()
        try await broker.test { client in
            _ = try await client.register("dpop@example.com", Self.password)
            let now = broker.clock.seconds()
            let signedIn = try await Self.login(
                client, "dpop@example.com", proof: try Self.proof(key, "POST", "/auth/login", at: now))
            #expect(signedIn.status == 200 && signedIn["token_type"] == "DPoP")
            let access = try #require(signedIn["access_token"]?.stringValue)
            let refresh = try #require(signedIn["refresh_token"]?.stringValue)
            let claims = try #require(jwtParts(access).claims)
            #expect(claims["cnf"]?["jkt"]?.stringValue == thumbprint, "bound: cnf.jkt is the key's thumbprint")

            // The good case, then every way a proof can be wrong.
            let good = try await Self.me(
                client, access, proof: try Self.proof(key, "GET", "/auth/me", token: access, at: now))
            #expect(good.status == 200 && good["email"] == "dpop@example.com")
            let asBearer = try await Self.me(client, access, scheme: "Bearer", proof: nil)
            #expect(asBearer.status == 401 && asBearer.header("WWW-Authenticate")?.hasPrefix("DPoP ") == true)
            let replayed = try Self.proof(key, "GET", "/auth/me", token: access, at: now)
            #expect(try await Self.me(client, access, proof: replayed).status == 200)
            let replay = try await Self.me(client, access, proof: replayed)
            #expect(replay.status == 401 && replay.error == "invalid_dpop_proof", "a proof is used once")
            let cases: [(String, String)] = [
                ("another URL", try Self.proof(key, "GET", "/auth/userinfo", token: access, at: now)),
                ("another method", try Self.proof(key, "POST", "/auth/me", token: access, at: now)),
                ("no ath", try Self.proof(key, "GET", "/auth/me", at: now)),
                ("another token's ath", try Self.proof(key, "GET", "/auth/me", token: access + "x", at: now)),
                ("another key", try Self.proof(other, "GET", "/auth/me", token: access, at: now)),
                ("not a JWT", "garbage"),
                // The key's own header, which the broker has seen (and keeps the key of), over claims signed by
                // another key: the signature is checked on every proof, whatever header it comes with.
                (
                    "the key's header with another key's signature",
                    try Self.swappedHeader(
                        of: try Self.proof(key, "GET", "/auth/me", token: access, at: now),
                        onto: try Self.proof(
                            try AsymmetricKey.generate(.ecP256), "GET", "/auth/me", token: access, at: now))
                ),
            ]
            for (name, proof) in cases {
                let refused = try await Self.me(client, access, proof: proof)
                #expect(refused.status == 401, "\(name)")
                #expect(refused.error == "invalid_dpop_proof", "\(name)")
            }
            // The same URL written another way (RFC 9449 §4.3: scheme and host in any case, the default port) is
            // this request's.
            let written = try DPoPProof.make(
                key: key, method: "GET", url: "HTTP://BROKER.test:80/auth/me", accessToken: access, nonce: nil, now: now
            )
            #expect(try await Self.me(client, access, proof: written).status == 200, "a URL written another way")
            // An iat at the edge of Int64 is a refusal, not an overflow that stops the broker: far past gets a
            // nonce like any stale clock, far future is refused by the verifier.
            for (iat, error) in [(Int64.min, "use_dpop_nonce"), (Int64.max, "invalid_dpop_proof")] {
                let extreme = try await Self.me(
                    client, access, proof: try Self.proof(key, "GET", "/auth/me", token: access, at: iat))
                #expect(extreme.status == 401 && extreme.error == error, "iat \(iat)")
            }
            // A proof from a clock that is off gets a nonce to use instead of iat (RFC 9449 §11.1).
            for (name, iat) in [("too old", now - 331), ("from the future", now + 31)] {
                let refused = try await Self.me(
                    client, access, proof: try Self.proof(key, "GET", "/auth/me", token: access, at: iat))
                #expect(refused.status == 401 && refused.error == "use_dpop_nonce", "\(name)")
                let nonce = try #require(refused.header("DPoP-Nonce"), "\(name)")
                let retried = try await Self.me(
                    client, access,
                    proof: try Self.proof(key, "GET", "/auth/me", token: access, nonce: nonce, at: iat))
                #expect(retried.status == 200, "\(name): the nonce vouches for freshness")
                let forged = try await Self.me(
                    client, access,
                    proof: try Self.proof(
                        key, "GET", "/auth/me", token: access,
                        nonce: String(nonce.dropLast()) + (nonce.hasSuffix("A") ? "B" : "A"), at: iat))
                #expect(forged.status == 401, "\(name): a forged nonce does not")
            }
            let noProof = try await Self.me(client, access, proof: nil)
            #expect(noProof.status == 401 && noProof.error == "invalid_dpop_proof")
            var twice: HTTPFields = [.authorization: "DPoP \(access)"]
            twice.append(
                HTTPField(name: Self.dpop, value: try Self.proof(key, "GET", "/auth/me", token: access, at: now)))
            twice.append(
                HTTPField(name: Self.dpop, value: try Self.proof(key, "GET", "/auth/me", token: access, at: now)))
            #expect(try await client.send(.get, "/auth/me", headers: twice).status == 401, "one DPoP header only")
            // A proof carrying its private key is refused outright.
            let privateJWK = try key.jwk(includePrivate: true)
            let leaky = try JWS.sign(
                payload: JSONValue.object([
                    "jti": "j-1", "htm": "GET", "htu": .string(Self.issuer + "/auth/me"), "iat": .int(now),
                    "ath": .string(Base64URL.encode(Digest.sha256(access))),
                ]).serializedBytes, key: key, kid: nil, type: "dpop+jwt",
                extraHeader: [
                    "jwk": .object([
                        "kty": "EC", "crv": "P-256", "x": .string(privateJWK.x ?? ""), "y": .string(privateJWK.y ?? ""),
                        "d": .string(privateJWK.d ?? ""),
                    ])
                ])
            #expect(try await Self.me(client, access, proof: leaky).error == "invalid_dpop_proof")

            // The refresh token: unspent without the key, rotated with it (and bound again).
            let bare = try await Self.refresh(client, refresh, proof: nil)
            #expect(bare.status == 400 && bare.error == "invalid_dpop_proof")
            let wrongKey = try await Self.refresh(
                client, refresh, proof: try Self.proof(other, "POST", "/auth/token", at: now))
            #expect(wrongKey.status == 400 && wrongKey.error == "invalid_dpop_proof")
            let rotated = try await Self.refresh(
                client, refresh, proof: try Self.proof(key, "POST", "/auth/token", at: now))
            #expect(rotated.status == 200 && rotated["token_type"] == "DPoP", "the thief's attempts spent nothing")
            let next = try #require(rotated["access_token"]?.stringValue)
            #expect(jwtParts(next).claims?["cnf"]?["jkt"]?.stringValue == thumbprint)

            // An unbound token is Bearer only.
            let plain = try await Self.login(client, "dpop@example.com", proof: nil)
            let unbound = try #require(plain["access_token"]?.stringValue)
            #expect(plain["token_type"] == "Bearer" && jwtParts(unbound).claims?["cnf"] == nil)
            #expect(try await Self.me(client, unbound, scheme: "Bearer", proof: nil).status == 200)
            let pretending = try await Self.me(
                client, unbound, proof: try Self.proof(key, "GET", "/auth/me", token: unbound, at: now))
            #expect(pretending.status == 401 && pretending.error == "invalid_token")
            let unboundRefresh = try #require(plain["refresh_token"]?.stringValue)
            #expect(try await Self.refresh(client, unboundRefresh, proof: nil).status == 200)
        }
    }

    /// `server.dpop_nonce`: a proof without the broker's nonce gets `use_dpop_nonce` and a nonce to use; with it,
    /// the request passes; a nonce from two windows ago is stale.
    @Test func theServerCanAskForANonce() async throws {
        let broker = try await InProcessBroker(config: #"{"server": {"dpop_nonce": true}}"#)
        let key = try AsymmetricKey.generate(.ecP256)
        try await broker.test { client in
            _ = try await client.register("nonce@example.com", Self.password)
            let now = broker.clock.seconds()
            let first = try await Self.login(
                client, "nonce@example.com", proof: try Self.proof(key, "POST", "/auth/login", at: now))
            #expect(first.status == 400 && first.error == "use_dpop_nonce")
            let nonce = try #require(first.header("DPoP-Nonce"))
            let signedIn = try await Self.login(
                client, "nonce@example.com", proof: try Self.proof(key, "POST", "/auth/login", nonce: nonce, at: now))
            #expect(signedIn.status == 200 && signedIn.header("DPoP-Nonce") != nil)
            let access = try #require(signedIn["access_token"]?.stringValue)
            let without = try await Self.me(
                client, access, proof: try Self.proof(key, "GET", "/auth/me", token: access, at: now))
            #expect(without.status == 401 && without.error == "use_dpop_nonce" && without.header("DPoP-Nonce") != nil)
            #expect(without.header("WWW-Authenticate")?.contains("use_dpop_nonce") == true)
            let with = try await Self.me(
                client, access, proof: try Self.proof(key, "GET", "/auth/me", token: access, nonce: nonce, at: now))
            #expect(with.status == 200)
            broker.clock.advance(by: 600)
            let later = broker.clock.seconds()
            let stale = try await Self.me(
                client, access,
                proof: try Self.proof(key, "GET", "/auth/me", token: access, nonce: nonce, at: later))
            #expect(stale.error == "use_dpop_nonce" || stale.error == "invalid_token", "the old nonce is stale")
            let forged = try await Self.me(
                client, access,
                proof: try Self.proof(
                    key, "GET", "/auth/me", token: access, nonce: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", at: now))
            #expect(forged.status == 401)
            let discovery = try await client.get("/.well-known/openid-configuration")
            #expect(discovery["dpop_signing_alg_values_supported"] == ["ES256", "EdDSA", "RS256"])
        }
    }
}
