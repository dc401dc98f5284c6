import BrokerConfiguration
import BrokerCore
import BrokerCredentials
import BrokerCrypto
import BrokerHTTP
import BrokerStore

/// Apps that register themselves (RFC 7591, issue "Tokens for every door" item 4): `POST /auth/clients`, on when
/// `server.client_registration` is `token` (an initial access token from `broker client registration-token`, good
/// for one registration) or `open` (anyone, public clients only, loopback or https redirect URIs). What is
/// registered is an app like any other — listed, removed, signed out by `broker client` — marked as having
/// registered itself, which the consent page says plainly, with its redirect host, beside the name it gave.
///
/// Nothing is stored unless the whole request is acceptable; the initial access token is spent only then.
package final class RegistrationService: ContextualService {
    package let context: ServiceContext
    let secrets: ClientSecretHasher
    /// Registrations per source network (`server.registrations_per_hour`, at once and per hour), in both modes: an
    /// open endpoint must not be a way to fill the store.
    let perAddress: RateLimiter
    /// Fetches `sector_identifier_uri` documents (public addresses only).
    let http: @Sendable () -> any HTTPTransport

    init(context: ServiceContext, secrets: ClientSecretHasher, http: @escaping @Sendable () -> any HTTPTransport) {
        self.context = context
        self.secrets = secrets
        self.http = http
        perAddress = RateLimiter(
            capacity: context.tokens.configuration.registrationsPerHour, per: 3600, clock: context.tokens.clock)
    }

    /// The longest list of redirect URIs one registration may carry.
    static let maxRedirectURIs = 10
    /// The longest `client_name`, in characters.
    static let maxClientName = 100
    /// What a registration's `client_id` starts with: told apart from an operator's names at a glance.
    static let clientIDPrefix = "reg-"
    /// `grant_types` a registered app may have.
    static let grantTypes: Set<String> = ["authorization_code", "refresh_token"]

    /// RFC 7591 §3.2.2's error codes.
    static let invalidRedirectURI = OAuthErrorCode("invalid_redirect_uri")
    static let invalidClientMetadata = OAuthErrorCode("invalid_client_metadata")

    static func metadataError(_ detail: String) -> APIError {
        APIError(status: 400, code: invalidClientMetadata, detail: detail)
    }

    /// `POST /auth/clients`: 201 with the registered metadata (and, for a confidential app, its secret, shown
    /// this once), or the RFC 7591 error; counted in the metrics and audited either way.
    package func register(_ input: RequestInput, authorization: String?, address: String?) async throws
        -> APIResponse
    {
        let mode = configuration.clientRegistration
        do {
            let response = try await registration(input, authorization: authorization, address: address, mode: mode)
            metrics.clientRegistration(outcome: "registered")
            return response
        } catch let error as APIError {
            metrics.clientRegistration(outcome: error.code.rawValue)
            audit.record(
                "client_registered", outcome: "failure",
                fields: ["mode": mode.rawValue, "reason": error.code.rawValue])
            throw error
        }
    }

    private func registration(
        _ input: RequestInput, authorization: String?, address: String?, mode: ClientRegistration
    ) async throws -> APIResponse {
        guard mode != .off else {
            throw APIError.notFound("apps do not register themselves here (server.client_registration is off)")
        }
        try perAddress.admit(
            address.map(SourceAddress.network), metrics: metrics, limit: "client_registrations",
            "too many registrations from this address; try again later")
        var initialToken: String?
        if mode == .token {
            do {
                initialToken = try TokenIssuer.bearer(authorization)
            } catch {
                throw APIError(
                    status: 401, code: .invalidToken,
                    detail: "registration needs an initial access token (broker client registration-token) "
                        + "as Authorization: Bearer",
                    headers: [("WWW-Authenticate", "Bearer error=\"invalid_token\"")])
            }
        }
        let metadata = try Self.metadata(input.fields, mode: mode)
        // Pairwise subjects (Core 8.1): for the sector_identifier_uri's host, whose document must list every
        // redirect URI; else for the redirect URIs' one host. Worked out before the initial access token is spent,
        // which only a registration that succeeds does.
        var sector: String?
        if metadata.pairwise {
            if let uri = metadata.sectorIdentifierURI {
                sector = try await sectorHost(uri, covering: metadata.redirectURIs)
            } else {
                switch AppRules.sector(of: metadata.redirectURIs) {
                case .success(let host): sector = host
                case .failure(let problem): throw Self.metadataError(problem.description)
                }
            }
        }
        if let initialToken {
            guard try await store.spendRegistrationToken(hash: Digest.sha256(initialToken), now: now) else {
                throw APIError(
                    status: 401, code: .invalidToken,
                    detail: "the initial access token is unknown, used or expired",
                    headers: [("WWW-Authenticate", "Bearer error=\"invalid_token\"")])
            }
        }
        let clientID = Self.clientIDPrefix + (try SecureRandom.identifier(byteCount: 16))
        let issued =
            ["none", "private_key_jwt"].contains(metadata.authMethod)
            ? nil : try secrets.newAppSecret(clientID: clientID)
        let secret = issued?.secret
        let issuedAt = now
        let app = AppRecord(
            clientID: clientID, secretHash: issued?.stored, redirectURIs: metadata.redirectURIs,
            postLogoutRedirectURIs: metadata.postLogoutRedirectURIs,
            backchannelLogoutURI: metadata.backchannelLogoutURI, firstParty: false,
            idTokenAlgorithm: metadata.idTokenAlgorithm, scopes: [], createdAt: issuedAt,
            registration: AppRecord.Registration(mode: mode.rawValue, clientName: metadata.clientName),
            jwks: metadata.jwks, jwksURI: metadata.jwksURI, pairwiseSector: sector,
            userinfoAlgorithm: metadata.userinfoAlgorithm)
        try await store.createApp(app)
        audit.record(
            "client_registered",
            fields: [
                "client_id": clientID, "mode": mode.rawValue, "kind": app.isPublic ? "public_app" : "app",
                "redirect_host": Self.redirectHost(app) ?? "-",
            ])
        var body: [String: JSONValue] = [
            "client_id": .string(clientID),
            "client_id_issued_at": .int(issuedAt),
            "redirect_uris": .array(metadata.redirectURIs.map(JSONValue.string)),
            "grant_types": .array(metadata.grantTypes.map(JSONValue.string)),
            "response_types": ["code"],
            "token_endpoint_auth_method": .string(metadata.authMethod),
            "id_token_signed_response_alg": .string(metadata.idTokenAlgorithm),
        ]
        if let secret {
            body["client_secret"] = .string(secret.exposed)
            body["client_secret_expires_at"] = .int(0)
        }
        if let name = metadata.clientName { body["client_name"] = .string(name) }
        if let scope = metadata.scope { body["scope"] = .string(scope) }
        if !metadata.postLogoutRedirectURIs.isEmpty {
            body["post_logout_redirect_uris"] = .array(metadata.postLogoutRedirectURIs.map(JSONValue.string))
        }
        if let uri = metadata.backchannelLogoutURI { body["backchannel_logout_uri"] = .string(uri) }
        if let jwks = metadata.jwks, let set = JSONValue.parse(jwks.utf8) { body["jwks"] = set }
        if let uri = metadata.jwksURI { body["jwks_uri"] = .string(uri) }
        body["subject_type"] = metadata.pairwise ? "pairwise" : "public"
        if let alg = metadata.userinfoAlgorithm { body["userinfo_signed_response_alg"] = .string(alg) }
        if let uri = metadata.sectorIdentifierURI { body["sector_identifier_uri"] = .string(uri) }
        return .tokens(.object(body), status: 201)
    }

    /// The host of `uri`, once its document — a JSON array of URIs — is found to list every one of
    /// `redirectURIs` (Core 8.1); else `invalid_client_metadata` saying why.
    private func sectorHost(_ uri: String, covering redirectURIs: [String]) async throws -> String {
        var request = HTTPClientRequest(url: uri, headers: [(name: "Accept", value: "application/json")])
        request.maxResponseBytes = 64 * 1024
        request.publicAddressesOnly = true
        let response: HTTPClientResponse
        do {
            response = try await http().send(request)
        } catch {
            throw Self.metadataError("sector_identifier_uri cannot be fetched: \(error)")
        }
        guard response.status == 200, let listed = JSONValue.parse(response.body)?.arrayValue else {
            throw Self.metadataError(
                "sector_identifier_uri must answer 200 with a JSON array of redirect URIs (it answered \(response.status))"
            )
        }
        let uris = Set(listed.compactMap(\.stringValue))
        if let missing = redirectURIs.first(where: { !uris.contains($0) }) {
            throw Self.metadataError("the sector_identifier_uri document does not list \(missing.prefix(200))")
        }
        guard let host = APIURL(uri)?.host else { throw Self.metadataError("sector_identifier_uri has no host") }
        return host.lowercased()
    }

    /// The host an app's first redirect URI names (what the consent page shows of a registered app), or `nil`
    /// for a private-use scheme.
    static func redirectHost(_ app: AppRecord) -> String? {
        app.redirectURIs.first.flatMap(APIURL.init).map(\.host)
    }

    /// A registration's metadata as it will be stored.
    struct Metadata: Equatable {
        var redirectURIs: [String]
        var postLogoutRedirectURIs: [String] = []
        var backchannelLogoutURI: String?
        var authMethod: String
        var grantTypes: [String]
        var clientName: String?
        var scope: String?
        var idTokenAlgorithm = "RS256"
        /// `private_key_jwt`: the app's keys (a JWK Set, JSON), or where to fetch them.
        var jwks: String?
        var jwksURI: String?
        /// `subject_type: pairwise`, and the `sector_identifier_uri` its sector comes from, if given.
        var pairwise = false
        var sectorIdentifierURI: String?
        /// `userinfo_signed_response_alg`, when the app wants userinfo signed.
        var userinfoAlgorithm: String?
    }

    /// The metadata of a registration request checked (RFC 7591 §2): what broker understands is held to the rules
    /// `broker client add` applies (and, when registration is `open`, to public clients with https or loopback
    /// redirect URIs); anything it does not understand is ignored, as §2 says. Pure: tested without a server.
    static func metadata(_ fields: [String: JSONValue], mode: ClientRegistration) throws(APIError) -> Metadata {
        func strings(_ name: String, max: Int) throws(APIError) -> [String]? {
            guard let value = fields[name], value != .null else { return nil }
            guard case .array(let items) = value, items.count <= max else {
                throw metadataError("\(name) must be an array of at most \(max) strings")
            }
            var list: [String] = []
            for item in items {
                guard case .string(let text) = item else { throw metadataError("\(name) must hold strings only") }
                if !list.contains(text) { list.append(text) }
            }
            return list
        }
        func string(_ name: String) throws(APIError) -> String? {
            guard let value = fields[name], value != .null else { return nil }
            guard case .string(let text) = value else { throw metadataError("\(name) must be a string") }
            return text
        }
        let isOpen = mode == .open
        let requested = try string("token_endpoint_auth_method")
        let authMethod: String
        switch requested {
        // An open endpoint registers public clients only (a secret anyone may obtain proves nothing): the answer
        // says "none", which RFC 7591 §3.2.1 lets the server decide.
        case _ where isOpen: authMethod = "none"
        case nil: authMethod = "client_secret_basic"
        case let method? where AppTokenService.authenticationMethods.contains(method): authMethod = method
        case let method?:
            throw metadataError(
                "token_endpoint_auth_method \"\(method.prefix(64))\" is not supported: "
                    + AppTokenService.authenticationMethods.joined(separator: ", "))
        }
        let isPublic = authMethod == "none"
        guard let redirectURIs = try strings("redirect_uris", max: maxRedirectURIs), !redirectURIs.isEmpty else {
            throw APIError(
                status: 400, code: invalidRedirectURI, detail: "redirect_uris is required (at least one URI)")
        }
        let postLogout = try strings("post_logout_redirect_uris", max: maxRedirectURIs) ?? []
        for uri in redirectURIs + postLogout {
            if let problem = redirectProblem(uri, isPublic: isPublic, open: isOpen) {
                throw APIError(status: 400, code: invalidRedirectURI, detail: problem)
            }
        }
        let grantTypes = try strings("grant_types", max: 8) ?? ["authorization_code"]
        guard grantTypes.contains("authorization_code"), grantTypes.allSatisfy(Self.grantTypes.contains) else {
            throw metadataError("grant_types must be authorization_code, with refresh_token or without")
        }
        let responseTypes = try strings("response_types", max: 4) ?? ["code"]
        guard responseTypes == ["code"] else { throw metadataError("response_types must be [\"code\"]") }
        var clientName: String?
        if let raw = try string("client_name") {
            switch AccountRules.displayName(raw) {
            case .success(let name?) where name.count <= maxClientName:
                clientName = name
            case .success(nil): break
            case .success: throw metadataError("client_name is longer than \(maxClientName) characters")
            case .failure(let violation): throw metadataError("client_name: \(violation.message)")
            }
        }
        var scope: String?
        if let raw = try string("scope") {
            let items = raw.split(separator: " ").map(String.init)
            for item in items where !ClientRules.validScope(item) {
                throw metadataError("scope \"\(item.prefix(64))\" is not a scope token")
            }
            scope = items.isEmpty ? nil : items.joined(separator: " ")
        }
        var backchannel: String?
        if let uri = try string("backchannel_logout_uri") {
            guard !isOpen else {
                throw metadataError(
                    "backchannel_logout_uri is not taken from an open registration (broker would post to it)")
            }
            guard uri.lowercased().hasPrefix("http"), AppRules.registrationProblem(uri, isPublic: false) == nil else {
                throw metadataError("backchannel_logout_uri must be an https URL (http on loopback)")
            }
            backchannel = uri
        }
        var algorithm = "RS256"
        if let alg = try string("id_token_signed_response_alg") {
            guard AppRules.idTokenAlgorithms.contains(alg) else {
                throw metadataError("id_token_signed_response_alg must be RS256, ES256 or EdDSA")
            }
            algorithm = alg
        }
        // request_uris need not be registered (discovery: require_request_uri_registration false): ignored.
        for unsupported in ["software_statement"] where fields[unsupported] != nil {
            throw metadataError("\(unsupported) is not supported by this broker")
        }
        // private_key_jwt (RFC 7523): the app's public keys, inline or where broker fetches them; exactly one.
        var jwks: String?
        var jwksURI: String?
        let namedURI = try string("jwks_uri")
        let hasKeys = (fields["jwks"].map { $0 != .null } ?? false) || namedURI != nil
        if authMethod == "private_key_jwt" || hasKeys {
            guard authMethod == "private_key_jwt" else {
                throw metadataError("jwks and jwks_uri are for token_endpoint_auth_method private_key_jwt")
            }
            switch (fields["jwks"], namedURI) {
            case (let set?, nil) where set != .null:
                let text = set.serialized()
                if let problem = AppRules.jwksProblem(text) { throw metadataError("jwks: \(problem)") }
                jwks = text
            case (nil, let uri?), (.some(.null), let uri?):
                if let problem = AppRules.jwksURIProblem(uri) { throw metadataError("jwks_uri: \(problem)") }
                jwksURI = uri
            default:
                throw metadataError("private_key_jwt needs the app's public keys: jwks or jwks_uri (one of them)")
            }
        }
        var pairwise = false
        switch try string("subject_type") {
        case nil, "public"?: break
        case "pairwise"?: pairwise = true
        case let other?:
            throw metadataError("subject_type \"\(other.prefix(64))\" is not supported: public or pairwise")
        }
        var userinfoAlgorithm: String?
        switch try string("userinfo_signed_response_alg") {
        case nil, "none"?: break
        case let alg? where AppRules.idTokenAlgorithms.contains(alg): userinfoAlgorithm = alg
        case _?: throw metadataError("userinfo_signed_response_alg must be RS256, ES256 or EdDSA")
        }
        let sectorURI = try string("sector_identifier_uri")
        if let sectorURI {
            guard sectorURI.lowercased().hasPrefix("https://"), APIURL(sectorURI) != nil, !sectorURI.contains("#")
            else {
                throw metadataError("sector_identifier_uri must be an https URL")
            }
        }
        return Metadata(
            redirectURIs: redirectURIs, postLogoutRedirectURIs: postLogout, backchannelLogoutURI: backchannel,
            authMethod: authMethod, grantTypes: grantTypes, clientName: clientName, scope: scope,
            idTokenAlgorithm: algorithm, jwks: jwks, jwksURI: jwksURI, pairwise: pairwise,
            sectorIdentifierURI: sectorURI, userinfoAlgorithm: userinfoAlgorithm)
    }

    /// Why a redirect URI cannot be registered: the rules of `broker client add`, and for an open registration
    /// https or http on loopback only (a private-use scheme names no host the consent page could show).
    static func redirectProblem(_ uri: String, isPublic: Bool, open: Bool) -> String? {
        if let problem = AppRules.registrationProblem(uri, isPublic: isPublic) { return problem }
        let lower = uri.lowercased()
        if open && !(lower.hasPrefix("https://") || lower.hasPrefix("http://")) {
            return "\(uri.prefix(200)): an open registration takes https redirect URIs (http on loopback) only"
        }
        return nil
    }
}
