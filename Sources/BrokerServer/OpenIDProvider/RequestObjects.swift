import BrokerCore
import BrokerCredentials
import BrokerCrypto
import BrokerHTTP
import BrokerStore

/// Request objects (OpenID Connect Core 6): an authorization request's parameters as a JWT, by value (`request`)
/// or by reference (`request_uri`, an https URL on the host of one of the app's redirect URIs, which broker
/// fetches from public addresses only — so an app's client id cannot send broker fetching anywhere). Unsigned
/// (`alg: none`) it is as trusted as a query string; signed, it must verify against the app's registered keys and
/// name the app as `iss` and broker as `aud`. Its members replace the query's (Core 6.3.3); `client_id` must be
/// the query's, and `response_type` too when both have one.
struct RequestObjects: ContextualService {
    let context: ServiceContext
    let http: @Sendable () -> any HTTPTransport
    let keys: ClientAssertions

    /// The largest request object taken, by value or fetched.
    static let maxBytes = 16 * 1024

    /// Why a request object is not used: an OAuth error for the redirect URI (once that is known to be good).
    struct Refusal: Error {
        let code: OAuthErrorCode
        let description: String
    }

    /// `query` with its request object's parameters in place, or `query` when it has none.
    func resolve(_ query: [String: String], app: AppRecord) async throws(Refusal) -> [String: String] {
        let object: String
        switch (query["request"], query["request_uri"]) {
        case (nil, nil): return query
        case (let value?, nil): object = value
        case (nil, let uri?): object = try await fetch(uri, app: app)
        default: throw Refusal(code: .invalidRequest, description: "request and request_uri cannot both be sent")
        }
        let claims = try await verify(object, app: app)
        var parameters = query
        parameters["request"] = nil
        parameters["request_uri"] = nil
        for (name, value) in claims {
            switch name {
            case "iss", "aud", "exp", "iat", "nbf", "jti", "request", "request_uri": continue
            default: break
            }
            switch value {
            case .string(let text): parameters[name] = text
            case .int(let number): parameters[name] = String(number)
            case .object, .array: parameters[name] = value.serialized()
            default: continue
            }
        }
        guard claims["client_id"]?.stringValue.map({ $0 == app.clientID }) ?? true else {
            throw Refusal(
                code: .invalidRequestObject, description: "the request object's client_id is not the request's")
        }
        if let inner = claims["response_type"]?.stringValue, let outer = query["response_type"], inner != outer {
            throw Refusal(
                code: .invalidRequestObject, description: "the request object's response_type is not the request's")
        }
        parameters["client_id"] = app.clientID
        return parameters
    }

    private func fetch(_ uri: String, app: AppRecord) async throws(Refusal) -> String {
        guard uri.lowercased().hasPrefix("https://"), uri.utf8.count <= 512, let url = APIURL(uri) else {
            throw Refusal(code: .invalidRequestURI, description: "request_uri must be an https URL")
        }
        let hosts = Set(app.redirectURIs.compactMap { APIURL($0)?.host.lowercased() })
        guard hosts.contains(url.host.lowercased()) else {
            throw Refusal(
                code: .invalidRequestURI,
                description: "request_uri must be on the host of one of the app's redirect URIs")
        }
        var request = HTTPClientRequest(url: uri, headers: [(name: "Accept", value: "application/oauth-authz-req+jwt")])
        request.maxResponseBytes = Self.maxBytes
        request.publicAddressesOnly = true
        let response: HTTPClientResponse
        do {
            response = try await http().send(request)
        } catch {
            throw Refusal(code: .invalidRequestURI, description: "the request_uri cannot be fetched: \(error)")
        }
        guard response.status == 200 else {
            throw Refusal(code: .invalidRequestURI, description: "the request_uri answered HTTP \(response.status)")
        }
        return String(decoding: response.body, as: UTF8.self).trimmingWhitespace()
    }

    private func verify(_ object: String, app: AppRecord) async throws(Refusal) -> [String: JSONValue] {
        guard object.utf8.count <= Self.maxBytes, let unverified = UnverifiedJWT(object),
            let header = unverified.header, let alg = header["alg"]?.stringValue
        else {
            throw Refusal(code: .invalidRequestObject, description: "the request object is not a JWT")
        }
        if alg == "none" {
            guard unverified.unsigned, let claims = unverified.claims else {
                throw Refusal(code: .invalidRequestObject, description: "an unsigned request object has no signature")
            }
            return claims
        }
        guard app.authenticatesWithKeys else {
            throw Refusal(
                code: .invalidRequestObject,
                description: "a signed request object needs the app's registered keys (jwks or jwks_uri)")
        }
        let keySet: JWTKeySet
        do {
            keySet = try await keys.keySet(of: app, kid: header["kid"]?.stringValue)
        } catch {
            throw Refusal(code: .invalidRequestObject, description: "the app's keys: \(error)")
        }
        var options = JWTVerifier.Options(issuer: app.clientID, audience: issuer, expectedType: nil)
        options.requireExpiry = false
        do {
            return try JWTVerifier(keys: keySet, options: options).verify(object, now: now).claims
        } catch {
            throw Refusal(code: .invalidRequestObject, description: "the request object does not verify: \(error)")
        }
    }
}
