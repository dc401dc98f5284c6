import BrokerCore

/// `GET /auth/{provider}/callback`: the provider's answer becomes an identity (``SignInService``), and the
/// feature that asked for the sign-in ends it — each in its own folder: an authorization request (an app's or
/// the CLI's) in `OpenIDProvider/`, a `broker link` in `Link/`, the device flow in `Device/`.
struct SignInCallback: Sendable {
    let signIn: SignInService
    let authorization: AuthorizationService
    let links: LinkService
    let devices: DeviceService

    func complete(provider name: String, query: [String: String], cookie: String?, address: String?) async throws
        -> APIResponse
    {
        try signIn.limit(address)
        let label = signIn.label(name)
        var response: APIResponse
        do {
            response = try await signIn.metrics.counting(
                success: "success",
                { outcome in
                    signIn.metrics.signIn(provider: label, outcome: outcome)
                    if outcome != "success" {
                        signIn.audit.record(
                            "sign_in", outcome: "failure", fields: ["provider": label, "reason": outcome])
                    }
                }
            ) {
                try await end(signIn.vouch(provider: name, query: query, cookie: cookie))
            }
        } catch let redirect as SignInRedirect {
            response = redirect.response
        }
        return signIn.clearingCookies(response, provider: name, cookie: cookie)
    }

    /// Hands a vouched-for sign-in to the feature that asked for it.
    private func end(_ vouched: VouchedSignIn) async throws -> APIResponse {
        switch vouched.sealed.purpose {
        case .device(let userCode, _):
            return try await devices.providerSignedIn(vouched, userCode: userCode)
        case .authorization(let sealedRequest, let binding):
            guard let request = AuthorizationRequest.open(sealedRequest, key: signIn.flowKey, now: signIn.now) else {
                throw SignInRedirect(reason: "expired", response: Page.response(status: 400, Page.staleAppForm))
            }
            if let link = request.link {
                return try await links.providerSignedIn(
                    vouched, request: request, link: link, browserBound: binding != nil)
            }
            return try await authorization.providerSignedIn(vouched, request: request, browserBound: binding != nil)
        }
    }
}
