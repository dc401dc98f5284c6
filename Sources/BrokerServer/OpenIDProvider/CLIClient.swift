import BrokerCore
import BrokerCrypto
import BrokerStore

/// The broker CLI as a client of broker's own OpenID Provider: built in, public (a native app, RFC 8252),
/// first-party (no consent page), any loopback port, PKCE S256 and `state` required. Its client id, `broker-cli`,
/// is reserved (RT3-10): no registration can take it, so a code issued to it — and the CLI session, with its
/// account scope, that such a code starts — comes only from the CLI's own sign-ins.
///
/// The CLI reaches it two ways, through the same request, code record and `authorization_code` grant as any
/// app: `/auth/authorize?client_id=broker-cli&…` (the sign-in page, the browser session), and the contract's
/// shortcut `/auth/{provider}/start` (straight to one provider, no browser session).
enum CLIClient {
    static var clientID: String { TokenIssuer.cliClientID }

    /// The CLI as the OpenID Provider sees a client.
    static let record = AppRecord(
        clientID: TokenIssuer.cliClientID, secretHash: nil, redirectURIs: [], firstParty: true, createdAt: 0)

    /// Whether `redirectURI` is one `client` may be sent to: the CLI's loopback, or a URI the app registered.
    static func redirectAllowed(_ redirectURI: String, for client: AppRecord) -> Bool {
        client.clientID == clientID ? isLoopbackRedirect(redirectURI) : AppRules.matches(redirectURI, of: client)
    }

    /// Whether `uri` is a loopback redirect the contract allows: `http`, host `127.0.0.1` or `[::1]`, any
    /// port, path `/callback`, nothing else.
    static func isLoopbackRedirect(_ uri: String) -> Bool {
        guard uri.hasPrefix("http://") else { return false }
        let rest = uri.dropFirst("http://".count)
        guard let slash = rest.firstIndex(of: "/") else { return false }
        let authority = rest[..<slash]
        guard rest[slash...] == "/callback" else { return false }
        let host: Substring
        let port: Substring?
        if authority.hasPrefix("[::1]") {
            host = "[::1]"
            let after = authority.dropFirst(5)
            port = after.isEmpty ? nil : (after.hasPrefix(":") ? after.dropFirst() : "x")
        } else if let colon = authority.firstIndex(of: ":") {
            host = authority[..<colon]
            port = authority[authority.index(after: colon)...]
        } else {
            host = authority
            port = nil
        }
        guard host == "127.0.0.1" || host == "[::1]" else { return false }
        if let port {
            guard port.utf8.count <= 5, port.isASCIIDigits, let number = Int(port),
                (1...65535).contains(number)
            else { return false }
        }
        return true
    }

    /// The CLI's request as its loopback pages make it (`/auth/{provider}/start`, the passkey page): a fresh
    /// sign-in (`prompt=login`) for the loopback `redirectURI`, handing back `state`, bound to `codeChallenge`.
    static func loopbackAuthorization(
        redirectURI: String, state: String, codeChallenge: String, expiresAt: Int64,
        link: AuthorizationRequest.LinkTarget? = nil
    ) -> AuthorizationRequest {
        AuthorizationRequest(
            clientID: clientID, redirectURI: redirectURI, scopes: [], state: state, nonce: nil,
            codeChallenge: codeChallenge, prompt: ["login"], maxAge: nil, loginHint: nil, expectedSubject: nil,
            expiresAt: expiresAt, link: link)
    }

    /// The longest `state` the CLI may send (it is handed back in the loopback redirect).
    static let maxState = 512

    /// The CLI's part of a loopback sign-in's start (RFC 8252, RFC 7636), as every `/start` checks it: a loopback
    /// `redirect_uri` the contract allows, a `state` of at most 512 characters, and an S256 `code_challenge`.
    static func loopbackRequest(_ query: [String: String]) throws(APIError)
        -> (redirectURI: String, state: String, codeChallenge: String)
    {
        guard let redirectURI = query["redirect_uri"], isLoopbackRedirect(redirectURI) else {
            throw APIError.invalidRequest(
                "redirect_uri must be http://127.0.0.1:PORT/callback or http://[::1]:PORT/callback")
        }
        guard let state = query["state"], !state.isEmpty, state.utf8.count <= maxState else {
            throw APIError.invalidRequest("state is required (at most 512 characters)")
        }
        guard query["code_challenge_method"] == "S256" else {
            throw APIError.invalidRequest("code_challenge_method must be S256")
        }
        guard let challenge = query["code_challenge"], PKCE.isValidS256Challenge(challenge) else {
            throw APIError.invalidRequest("code_challenge must be an S256 challenge (43 base64url characters)")
        }
        return (redirectURI, state, challenge)
    }
}

/// The one-time codes of the authorization endpoint, for apps and the CLI alike: one record
/// (``AuthorizationCodeRecord``), redeemed by one grant (``AppTokenService/authorizationCode(_:authorization:)``).
struct AuthorizationCodes: ContextualService {
    let context: ServiceContext

    /// How long a code lives (RFC 6749 §4.1.2 recommends at most ten minutes).
    static let lifetime: Int64 = 60

    /// A new code for `request`, signed in as `user`; the location that hands it to the client (with `state`
    /// and `iss`, RFC 9207).
    func issue(
        _ request: AuthorizationRequest, user: UserID, signedInWith: ProviderID, authTime: Int64,
        browserSession: String?, link: IdentityRecord? = nil, linkSession: String? = nil
    ) async throws -> String {
        let code = try await mint(
            request, user: user, signedInWith: signedInWith, authTime: authTime, browserSession: browserSession,
            link: link, linkSession: linkSession)
        return request.response([("code", code)], issuer: issuer)
    }

    /// A new code for `request`, signed in as `user`, stored (its hash) for one redemption.
    func mint(
        _ request: AuthorizationRequest, user: UserID, signedInWith: ProviderID, authTime: Int64,
        browserSession: String?, link: IdentityRecord? = nil, linkSession: String? = nil
    ) async throws -> String {
        let code = try SecureRandom.token(byteCount: 32)
        try await store.createAuthorizationCode(
            AuthorizationCodeRecord(
                hash: Digest.sha256(code), clientID: request.clientID, userID: user, redirectURI: request.redirectURI,
                codeChallenge: request.codeChallenge, scope: request.scopes.joined(separator: " "),
                nonce: request.nonce, authTime: authTime, signedInWith: signedInWith, browserSession: browserSession,
                link: link, linkSession: linkSession, resource: request.resource,
                claims: request.claims.flatMap { $0.isEmpty ? nil : $0.serialized }, expiresAt: now + Self.lifetime))
        return code
    }
}

extension ContextualService {
    /// The client an authorization request or a code names: the built-in CLI, the account page, or a registered
    /// app.
    func client(clientID: String) async throws -> AppRecord? {
        switch clientID {
        case CLIClient.clientID: CLIClient.record
        case AccountPageClient.clientID: AccountPageClient.record(issuer: issuer)
        default: try await app(clientID: clientID)
        }
    }
}
