import BrokerCore
import BrokerCrypto
import BrokerStore
import Logging
import ProviderSupport

/// `private_key_jwt` and `client_secret_jwt` client authentication (RFC 7523 §2.2 and §3, OpenID Connect Core 9):
/// an app without a secret signs a short JWT with its own key, and broker checks it against the public keys the
/// app registered — inline (`broker client add … --jwks-file`, RFC 7591 `jwks`) or at its `jwks_uri`, fetched as
/// a trusted issuer's are (cached, one refetch for an unknown `kid`, private addresses refused unless configured);
/// an app with a secret may instead send a JWT under HS256 keyed with its secret, which broker works out again
/// from what it stores (``ClientSecretHasher/appSecret(clientID:stored:)``).
///
/// The assertion must name the app as `iss` and `sub`, this broker (its issuer, or the endpoint it is sent to)
/// in `aud`, expire within an hour, and carry a `jti` used once: a replay within its lifetime is refused.
struct ClientAssertions: ContextualService {
    let context: ServiceContext
    /// The keys of apps the operator added (their `jwks_uri` is the operator's choice, as a trusted issuer's is).
    let keys: IssuerDirectory
    /// The keys of apps that registered themselves: public addresses only, whatever the URL says.
    let registeredKeys: IssuerDirectory
    let secrets: ClientSecretHasher

    /// RFC 7523 §2.2's `client_assertion_type`.
    static let type = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

    /// The longest life an assertion may claim (its `jti` is kept that long).
    static let maxLifetime: Int64 = 3600

    /// The broker's own endpoints an assertion's `aud` may name besides the issuer.
    private var audiences: Set<String> {
        Set([issuer] + ["/auth/token", "/auth/par", "/auth/introspect", "/auth/revoke"].map { issuer + $0 })
    }

    private func refused(_ why: String) -> APIError {
        logger.info("client assertion refused", metadata: ["reason": "\(why)"])
        return APIError(
            status: 401, code: .invalidClient, detail: "client authentication failed: \(why)",
            headers: [("WWW-Authenticate", "Basic realm=\"broker\"")])
    }

    /// The app `assertion` authenticates (and `clientID`, when the request names one, must be).
    func authenticate(_ assertion: String, clientID named: String?) async throws -> AppRecord {
        guard assertion.utf8.count <= 8192, let unverified = UnverifiedJWT(assertion),
            let issuerClaim = unverified.claims?["iss"]?.stringValue
        else { throw refused("client_assertion is not a JWT") }
        guard named == nil || named == issuerClaim else { throw refused("the assertion's iss is not client_id") }
        var options = JWTVerifier.Options(issuer: issuerClaim, audience: nil, expectedType: nil)
        options.requiredClaims = ["sub", "aud", "jti"]
        let verified: [String: JSONValue]
        let app: AppRecord
        if unverified.header?["alg"]?.stringValue == "HS256" {
            (app, verified) = try await secretSigned(assertion, clientID: issuerClaim, options: options)
        } else {
            (app, verified) = try await keySigned(
                assertion, clientID: issuerClaim, kid: unverified.header?["kid"]?.stringValue, options: options)
        }
        guard verified["sub"]?.stringValue == app.clientID else { throw refused("the assertion's sub is not the app") }
        let audience: [String] =
            switch verified["aud"] {
            case .string(let one)?: [one]
            case .array(let many)?: many.compactMap(\.stringValue)
            default: []
            }
        guard !audiences.isDisjoint(with: audience) else {
            throw refused("the assertion's aud is not this broker (\(issuer)) or its token endpoint")
        }
        guard let expiresAt = verified["exp"]?.intValue, expiresAt <= now + Self.maxLifetime + 60 else {
            throw refused("the assertion lives longer than \(Self.maxLifetime) seconds")
        }
        guard let jti = verified["jti"]?.stringValue, !jti.isEmpty, jti.utf8.count <= 256 else {
            throw refused("the assertion has no usable jti")
        }
        guard try await store.recordExchange(issuer: "client-assertion " + app.clientID, jti: jti, expiresAt: expiresAt)
        else {
            audit.record(
                "client_assertion_replayed", outcome: "failure", fields: ["client_id": app.clientID])
            throw refused("this assertion (its jti) has been used before")
        }
        return app
    }

    /// `client_secret_jwt`: HS256 under the app's secret. Only an app whose secret broker can work out again (one
    /// issued since this method exists) can use it.
    private func secretSigned(_ assertion: String, clientID: String, options: JWTVerifier.Options) async throws
        -> (AppRecord, [String: JSONValue])
    {
        guard let app = try await app(clientID: clientID), let stored = app.secretHash else {
            throw refused("no app with a secret is registered as this iss")
        }
        guard let secret = secrets.appSecret(clientID: app.clientID, stored: stored) else {
            throw refused(
                "this app's secret was issued before client_secret_jwt: register it again for a new secret, or "
                    + "authenticate with the secret itself")
        }
        let bytes = Array(assertion.utf8)
        guard case .success(let parts) = JWTVerifier.segments(bytes),
            let signature = Base64URL.decode(parts[2]), let payload = Base64URL.decode(parts[1]),
            ConstantTime.equals(
                HMAC.authenticate(.sha256, key: Array(secret.exposed.utf8), data: Array(bytes[..<parts[1].endIndex])),
                signature)
        else { throw refused("the assertion does not verify: the HMAC is not the app's") }
        guard let claims = JSONValue.parse(payload)?.objectValue else { throw refused("the assertion is not a JWT") }
        do {
            try JWTVerifier(keys: JWTKeySet(), options: options).check(claims: claims, now: now)
        } catch {
            throw refused("the assertion does not verify: \(error)")
        }
        return (app, claims)
    }

    /// `private_key_jwt`: signed by one of the app's registered keys.
    private func keySigned(_ assertion: String, clientID: String, kid: String?, options: JWTVerifier.Options)
        async throws -> (AppRecord, [String: JSONValue])
    {
        guard let app = try await app(clientID: clientID), app.authenticatesWithKeys else {
            throw refused("no app that authenticates with private_key_jwt is registered as this iss")
        }
        let keySet: JWTKeySet
        do {
            keySet = try await self.keySet(of: app, kid: kid)
        } catch {
            throw refused(error.description)
        }
        do {
            return (app, try JWTVerifier(keys: keySet, options: options).verify(assertion, now: now).claims)
        } catch {
            throw refused("the assertion does not verify: \(error)")
        }
    }

    /// Why an app's keys are not to be had.
    struct KeysUnavailable: Error, CustomStringConvertible {
        let description: String
    }

    /// The app's registered public keys: inline, or fetched from its `jwks_uri` (one that should hold `kid`).
    func keySet(of app: AppRecord, kid: String?) async throws(KeysUnavailable) -> JWTKeySet {
        if let inline = app.jwks {
            guard let set = try? JWTKeySet(jwks: JWKSet.parse(Array(inline.utf8))) else {
                throw KeysUnavailable(description: "the app's registered keys are not usable")
            }
            return set
        }
        guard let uri = app.jwksURI else { throw KeysUnavailable(description: "the app has no keys") }
        do {
            return try await (app.registration == nil ? keys : registeredKeys).keys(
                issuer: "the app \(app.clientID)", kid: kid, jwksURI: uri)
        } catch {
            throw KeysUnavailable(description: "cannot fetch the app's keys: \(error.description)")
        }
    }
}
