import BrokerCore
import Testing

/// The wire documents both sides share: what the server writes the client reads back unchanged, and what the
/// contract does not allow is refused with what is missing.
@Suite("wire documents")
struct WireDocumentTests {
    @Test func documentsRoundTrip() throws {
        let user = try #require(UserID("custom:0b4e7a0c-3f5e-4d8e-9b5a-2c1d6e7f8a9b"))
        let token = TokenResponse(
            userID: user, provider: .passkey, accessToken: "a.b.c", tokenType: "DPoP", expiresIn: 900,
            refreshToken: "rt", scope: "account")
        #expect(try TokenResponse(json: token.json) == token)
        let device = DeviceAuthorizationResponse(
            deviceCode: "dc", userCode: "BCDF-GHJK", verificationURI: "https://b/device",
            verificationURIComplete: "https://b/device?user_code=BCDF-GHJK", expiresIn: 600, interval: 5)
        #expect(try DeviceAuthorizationResponse(json: device.json) == device)
        let providers = ProvidersResponse(providers: [.init(id: "google", name: "Google", flow: "browser")])
        #expect(try ProvidersResponse(json: providers.json) == providers)
        let app = OpenIDTokenResponse(
            accessToken: "a.b.c", tokenType: "Bearer", expiresIn: 300, scope: "openid offline_access",
            refreshToken: "rt", idToken: "h.p.s")
        #expect(try OpenIDTokenResponse(json: app.json) == app)
        #expect(app.json["user_id"] == nil && app.json["provider"] == nil, "an app gets the standard fields only")
        let error = ErrorResponse(code: .lastIdentity, description: "the only way in")
        #expect(ErrorResponse(json: error.json) == error)
    }

    @Test func whatTheContractDoesNotAllowIsRefused() throws {
        #expect(throws: WireError.self) { _ = try TokenResponse(json: ["user_id": "custom:x", "expires_in": 60]) }
        #expect(throws: WireError.self) {
            _ = try TokenResponse(json: ["user_id": "not a user id", "access_token": "a", "expires_in": 60])
        }
        #expect(throws: WireError.self) {
            _ = try TokenResponse(json: ["user_id": "custom:x", "access_token": "a", "expires_in": 0])
        }
        #expect(throws: WireError.self) { _ = try ProvidersResponse(json: ["providers": [["name": "no id"]]]) }
        #expect(throws: WireError.self) { _ = try OpenIDTokenResponse(json: ["access_token": "a", "expires_in": 60]) }
        let plain = try OpenIDTokenResponse(json: ["access_token": "a", "token_type": "Bearer", "expires_in": 60])
        #expect(plain.refreshToken == nil && plain.idToken == nil && plain.scope == "")
        #expect(ErrorResponse(json: ["status": "ok"]) == nil && ErrorResponse(json: nil) == nil)
        // An older broker: no provider (the user id's), no interval (RFC 8628's 5), no token_type (Bearer).
        let old = try TokenResponse(
            json: ["user_id": "google:123", "access_token": "a", "expires_in": 60])
        #expect(old.provider == "google" && old.tokenType == "Bearer" && old.refreshToken == nil)
        let device = try DeviceAuthorizationResponse(
            json: ["device_code": "d", "user_code": "u", "verification_uri": "v", "expires_in": 60, "interval": 0])
        #expect(device.interval == 1, "never a busy loop")
    }

    /// What the CLI prints with `--format json` is the server's answer under the server's names, plus when it
    /// expires and what the command adds: read back by the very type the server writes, nothing lost.
    @Test func whatTheCLIPrintsIsTheServersAnswer() throws {
        let user = try #require(UserID("client:deploy"))
        let answer = TokenResponse(
            userID: user, provider: "client", accessToken: "a.b.c", tokenType: "Bearer", expiresIn: 300,
            scope: "read", issuedTokenType: "urn:ietf:params:oauth:token-type:access_token")
        let printed = TokenOutput(answer, receivedAt: 1_000, extra: ["profile": "ci"]).json
        #expect(printed["expires_at"]?.intValue == 1_300 && printed["profile"]?.stringValue == "ci")
        #expect(try TokenResponse(json: printed) == answer)
        let keys = Set(printed.objectValue?.keys.map { $0 } ?? [])
        #expect(keys == Set(answer.json.objectValue?.keys.map { $0 } ?? []).union(["expires_at", "profile"]))
        // An offline mint knows no user id or provider: neither is printed.
        let offline = TokenOutput(accessToken: "h.p.s", tokenType: "Bearer", expiresIn: 60, expiresAt: 60).json
        #expect(offline["user_id"] == nil && offline["provider"] == nil && offline["scope"] == nil)
    }
}
