import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import Synchronization

/// The two documents a relying party reads first: the OpenID discovery document and the signing keys (JWKS),
/// made from the issuer and the key ring.
package final class DiscoveryService: ContextualService {
    package let context: ServiceContext

    init(context: ServiceContext) { self.context = context }

    var keys: KeyManager { tokens.keys }

    /// The algorithms access tokens are signed with: the key ring's.
    var accessTokenAlgorithms: [String] {
        var algorithms: [String] = []
        for entry in keys.current.ring.published(now: now, retention: keys.retention)
        where !algorithms.contains(entry.key.algorithm.rawValue) {
            algorithms.append(entry.key.algorithm.rawValue)
        }
        return algorithms
    }

    /// The algorithms an app's id tokens may be signed with: RS256 (which OpenID Connect requires) and the
    /// ring's current key's.
    var idTokenAlgorithms: [String] {
        var algorithms = keys.current.idTokenSigner == nil ? [] : ["RS256"]
        let current = keys.current.ring.current.key.algorithm.rawValue
        if !algorithms.contains(current) { algorithms.append(current) }
        return algorithms
    }

    /// The discovery document as last made, with the issuer and the algorithms it lists: made again only when one
    /// of them changes (the issuer is set once the port is bound; a key rotates into or out of the published set),
    /// so a request for it serializes nothing, and every connection's prepared answer (``ConstantDocumentHandler``)
    /// stays while the bytes are the same array.
    private let madeDiscovery = Mutex<(from: DiscoveryInputs, response: APIResponse)?>(nil)

    /// What the discovery document changes with.
    private struct DiscoveryInputs: Equatable {
        let issuer: String
        let idTokenAlgorithms: [String]
        let accessTokenAlgorithms: [String]
    }

    package func discovery() -> APIResponse {
        let inputs = DiscoveryInputs(
            issuer: issuer, idTokenAlgorithms: idTokenAlgorithms, accessTokenAlgorithms: accessTokenAlgorithms)
        if let kept = madeDiscovery.withLock({ $0 }), kept.from == inputs { return kept.response }
        var response = discovery(inputs)
        response.serialized = response.body.serializedBytes + [UInt8(ascii: "\n")]
        madeDiscovery.withLock { $0 = (inputs, response) }
        return response
    }

    private func discovery(_ inputs: DiscoveryInputs) -> APIResponse {
        let base = inputs.issuer
        var members: [String: JSONValue] = [
            "issuer": .string(base),
            "jwks_uri": .string(base + "/.well-known/jwks.json"),
            "token_endpoint": .string(base + "/auth/token"),
            "revocation_endpoint": .string(base + "/auth/revoke"),
            "device_authorization_endpoint": .string(base + "/auth/device"),
            "userinfo_endpoint": .string(base + "/auth/userinfo"),
            "authorization_endpoint": .string(base + "/auth/authorize"),
            "introspection_endpoint": .string(base + "/auth/introspect"),
            "end_session_endpoint": .string(base + "/auth/end-session"),
            "dpop_signing_alg_values_supported": .array(DPoPChecker.algorithms.map(JSONValue.string)),
            "backchannel_logout_supported": true,
            "backchannel_logout_session_supported": true,
            "pushed_authorization_request_endpoint": .string(base + "/auth/par"),
            "require_pushed_authorization_requests": .bool(configuration.requirePAR),
            "introspection_endpoint_auth_methods_supported": .array(["client_secret_basic", "client_secret_post"]),
            "grant_types_supported": .array(Self.grantTypes.map(JSONValue.string)),
            "response_types_supported": .array(["code"]),
            "subject_types_supported": .array(["public", "pairwise"]),
            "code_challenge_methods_supported": .array(["S256"]),
            "token_endpoint_auth_methods_supported": .array(
                ["none", "client_secret_basic", "client_secret_post", "client_secret_jwt", "private_key_jwt"]),
            "token_endpoint_auth_signing_alg_values_supported": .array(["RS256", "ES256", "EdDSA", "HS256"]),
            "revocation_endpoint_auth_methods_supported": .array(["none"]),
            "id_token_signing_alg_values_supported": .array(inputs.idTokenAlgorithms.map(JSONValue.string)),
            "access_token_signing_alg_values_supported": .array(inputs.accessTokenAlgorithms.map(JSONValue.string)),
            "userinfo_signing_alg_values_supported": .array(
                (["none"] + inputs.idTokenAlgorithms).map(JSONValue.string)),
            "scopes_supported": .array(AppRules.standardScopes.map(JSONValue.string)),
            "response_modes_supported": .array(["query", "form_post"]),
            "prompt_values_supported": .array(["none", "login", "consent", "select_account"]),
            "claims_parameter_supported": true,
            "acr_values_supported": .array(AuthenticationContext.levels.map(JSONValue.string)),
            "ui_locales_supported": .array(["en"]),
            "request_parameter_supported": true,
            "request_uri_parameter_supported": true,
            "require_request_uri_registration": false,
            "request_object_signing_alg_values_supported": .array(["none", "RS256", "ES256", "EdDSA"]),
            "authorization_response_iss_parameter_supported": true,
            "claims_supported": .array(
                [
                    "iss", "sub", "aud", "iat", "nbf", "exp", "jti", "idp", "client_id", "sid", "email",
                    "email_verified", "name", "given_name", "family_name", "preferred_username", "picture", "locale",
                    "updated_at", "scope", "auth_time", "nonce", "at_hash", "azp", "acr", "amr",
                ].map(JSONValue.string)
            ),
        ]
        // RFC 8414 §2: published only when apps may register themselves (server.client_registration).
        if configuration.clientRegistration != .off {
            members["registration_endpoint"] = .string(base + "/auth/clients")
        }
        // Client ID Metadata Documents: an https URL as client_id (server.client_metadata_hosts).
        if configuration.acceptsClientMetadataDocuments {
            members["client_id_metadata_document_supported"] = true
        }
        let document = JSONValue.object(members)
        return APIResponse(status: 200, body: document, headers: [("Cache-Control", "public, max-age=300")])
    }

    static let grantTypes = [
        "authorization_code", "refresh_token", "client_credentials", ClientService.tokenExchangeGrant,
        DeviceService.grantType,
    ]

    func jwks() -> APIResponse {
        // Short caching: a verifier that meets an unknown kid refetches anyway.
        let current = keys.current
        return APIResponse(
            status: 200, body: current.jwks, headers: [("Cache-Control", "public, max-age=60")],
            serialized: current.jwksBytes)
    }
}
