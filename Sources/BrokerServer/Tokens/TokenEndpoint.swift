import BrokerConfiguration
import BrokerCore
import BrokerCrypto
import BrokerStore

/// `POST /auth/token`, and what every request that issues tokens goes through (`/auth/login` and
/// `/auth/register` too): the DPoP proof it sent, checked, and what it issues bound to the proof's key.
final class TokenEndpoint: ContextualService {
    let context: ServiceContext
    let grants: GrantService
    let appTokens: AppTokenService
    let clients: ClientService

    init(context: ServiceContext, grants: GrantService, appTokens: AppTokenService, clients: ClientService) {
        self.context = context
        self.grants = grants
        self.appTokens = appTokens
        self.clients = clients
    }

    /// Runs a request that issues tokens (`/auth/token`, `/auth/login`, `/auth/register`) under the key its DPoP
    /// proof proved (``DPoPRequest/current``, set by ``ErrorAndLogMiddleware``), if it sent one: the proof is
    /// checked (RFC 9449 §4.3, no `ath`) and what the request issues is bound to its key — the access token
    /// always, the session (its refresh token) for public clients: the broker CLI and public apps.
    nonisolated(nonsending) func bound(
        input: RequestInput, authorization: String?,
        _ issue: nonisolated(nonsending) @Sendable () async throws -> APIResponse
    ) async throws -> APIResponse {
        guard let request = DPoPRequest.current else { return try await issue() }
        let proof: DPoPChecker.Proof
        do {
            proof = try await tokens.dpop.check(
                request.proofs, method: request.method, url: issuer + request.path, accessToken: nil, now: now)
        } catch {
            metrics.dpop(outcome: error.code.rawValue)
            throw error.tokenEndpointError
        }
        metrics.dpop(outcome: "bound")
        var bindsSession = true
        // A confidential app's refresh token is held by its secret (RFC 9449 §5); a public app's by the key.
        if AppTokenService.isAppRequest(input, authorization: authorization),
            let named = (try? clients.presentedClient(input, authorization: authorization))?.id,
            let app = try await app(clientID: named)
        {
            bindsSession = app.isPublic
        }
        var response = try await DPoPBinding.$current.withValue(
            DPoPBinding.Key(thumbprint: proof.thumbprint, bindsSession: bindsSession)
        ) { try await issue() }
        // Issued: only now is the proof's jti written (RT3-8), so that a proof sent with a refresh token, code
        // or password that is refused anyway writes nothing to the store. Two requests with one proof at the same
        // moment both reached the grant; each grant is single-use (a code, a rotation) or needs the client's own
        // secret or password, and the one that loses this write is refused.
        do {
            try await tokens.dpop.spend(proof)
        } catch {
            metrics.dpop(outcome: error.code.rawValue)
            throw error.tokenEndpointError
        }
        if tokens.configuration.dpopNonce { response.headers.append(("DPoP-Nonce", tokens.dpop.nonce(now: now))) }
        return response
    }

    /// `POST /auth/token`: the code grant (apps' and the CLI's: one grant) goes to ``AppTokenService``, an app's
    /// refresh with its authentication first, everything else to ``GrantService``.
    nonisolated(nonsending) func token(_ input: RequestInput, authorization: String?) async throws -> APIResponse {
        let grant = try input.string("grant_type")
        if grant == "authorization_code" {
            guard AppTokenService.isAppRequest(input, authorization: authorization) else {
                return try await appTokens.authorizationCode(input, authorization: authorization)
            }
            return try await metrics.counting(success: "issued", { self.metrics.appToken(outcome: $0) }) {
                try await appTokens.authorizationCode(input, authorization: authorization)
            }
        }
        if grant == "refresh_token", AppTokenService.isAppRequest(input, authorization: authorization) {
            let app = try await appTokens.authenticate(input, authorization: authorization)
            return try await grants.refresh(input, client: app)
        }
        return try await grants.token(input, authorization: authorization)
    }
}
