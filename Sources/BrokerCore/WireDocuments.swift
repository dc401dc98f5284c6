/// The broker API's documents as types both sides share (issue "Rooms for the next floor", item 3): the server
/// builds them and sends ``json``; the client reads them with `init(json:)`, which refuses what the contract
/// does not allow. One definition of each field's name, so the two sides cannot drift apart.

/// Why a document could not be read.
package struct WireError: Error, Sendable, Equatable, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

/// The contract's session answer (`/auth/login`, `/auth/register`, `/auth/token` for the CLI).
package struct TokenResponse: Sendable, Equatable {
    package var userID: UserID
    /// The way in of this session (`signed_in_with`, else the provider the user id was made from).
    package var provider: ProviderID
    package var accessToken: String
    package var tokenType: String
    package var expiresIn: Int64
    package var refreshToken: String?
    /// An account token's scope (`account`), said when it is not the default.
    package var scope: String?
    /// What a token exchange issued (RFC 8693 §2.2.1: `urn:ietf:params:oauth:token-type:access_token`).
    package var issuedTokenType: String?

    package init(
        userID: UserID, provider: ProviderID, accessToken: String, tokenType: String, expiresIn: Int64,
        refreshToken: String? = nil, scope: String? = nil, issuedTokenType: String? = nil
    ) {
        self.userID = userID
        self.provider = provider
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.expiresIn = expiresIn
        self.refreshToken = refreshToken
        self.scope = scope
        self.issuedTokenType = issuedTokenType
    }

    package var json: JSONValue {
        var body: [String: JSONValue] = [
            "user_id": .string(userID.description), "provider": .string(provider.rawValue),
            "access_token": .string(accessToken), "token_type": .string(tokenType), "expires_in": .int(expiresIn),
        ]
        if let refreshToken { body["refresh_token"] = .string(refreshToken) }
        if let scope { body["scope"] = .string(scope) }
        if let issuedTokenType { body["issued_token_type"] = .string(issuedTokenType) }
        return .object(body)
    }

    package init(json: JSONValue) throws(WireError) {
        guard let user = json["user_id"]?.stringValue.flatMap(UserID.init),
            let access = json["access_token"]?.stringValue, !access.isEmpty,
            let expiresIn = json["expires_in"]?.intValue, expiresIn > 0
        else { throw WireError("the session response lacks user_id, access_token or expires_in") }
        userID = user
        // An older broker did not say the way in: the provider the user id was made from.
        provider = json["provider"]?.stringValue.flatMap(ProviderID.init(rawValue:)) ?? user.provider
        accessToken = access
        tokenType = json["token_type"]?.stringValue ?? "Bearer"
        self.expiresIn = expiresIn
        refreshToken = json["refresh_token"]?.stringValue
        scope = json["scope"]?.stringValue
        issuedTokenType = json["issued_token_type"]?.stringValue
    }
}

/// A token as the CLI prints it with `--format json` (`broker token`, `broker mint`, online or offline): the
/// fields of the broker's answer it has (``TokenResponse``'s names: `user_id`, `provider`, `access_token`,
/// `token_type`, `expires_in`, `scope`, `issued_token_type`), when it expires (`expires_at`, seconds since 1970), and what the command
/// adds — the session's `broker` and `profile`, an offline mint's `header` and `claims`.
package struct TokenOutput: Sendable, Equatable {
    package var userID: UserID?
    package var provider: ProviderID?
    package var accessToken: String
    package var tokenType: String
    package var expiresIn: Int64
    package var expiresAt: Int64
    package var scope: String?
    package var issuedTokenType: String?
    /// Fields the command adds beside the token's (never one of the token's own names).
    package var extra: [String: JSONValue]

    package init(
        userID: UserID? = nil, provider: ProviderID? = nil, accessToken: String, tokenType: String, expiresIn: Int64,
        expiresAt: Int64, scope: String? = nil, issuedTokenType: String? = nil, extra: [String: JSONValue] = [:]
    ) {
        self.userID = userID
        self.provider = provider
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.expiresIn = expiresIn
        self.expiresAt = expiresAt
        self.scope = scope
        self.issuedTokenType = issuedTokenType
        self.extra = extra
    }

    /// The broker's answer, received at `now`.
    package init(_ response: TokenResponse, receivedAt now: Int64, extra: [String: JSONValue] = [:]) {
        self.init(
            userID: response.userID, provider: response.provider, accessToken: response.accessToken,
            tokenType: response.tokenType, expiresIn: response.expiresIn, expiresAt: now + response.expiresIn,
            scope: response.scope, issuedTokenType: response.issuedTokenType, extra: extra)
    }

    package var json: JSONValue {
        var body = extra
        if let userID { body["user_id"] = .string(userID.description) }
        if let provider { body["provider"] = .string(provider.rawValue) }
        body["access_token"] = .string(accessToken)
        body["token_type"] = .string(tokenType)
        body["expires_in"] = .int(expiresIn)
        body["expires_at"] = .int(expiresAt)
        if let scope { body["scope"] = .string(scope) }
        if let issuedTokenType { body["issued_token_type"] = .string(issuedTokenType) }
        return .object(body)
    }
}

/// An app's token answer at the OpenID Provider's token endpoint (RFC 6749 §5.1, OpenID Connect Core 3.1.3.3):
/// the standard fields only. A refresh token only when the app was granted `offline_access`, an id token only
/// with `openid`.
package struct OpenIDTokenResponse: Sendable, Equatable {
    package var accessToken: String
    /// `Bearer`, or `DPoP` for a token bound to the app's proof key (RFC 9449 §5).
    package var tokenType: String
    package var expiresIn: Int64
    /// The scope granted (RFC 6749 §5.1: said whenever it may differ from the one asked for).
    package var scope: String
    package var refreshToken: String?
    package var idToken: String?

    package init(
        accessToken: String, tokenType: String, expiresIn: Int64, scope: String, refreshToken: String? = nil,
        idToken: String? = nil
    ) {
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.expiresIn = expiresIn
        self.scope = scope
        self.refreshToken = refreshToken
        self.idToken = idToken
    }

    package var json: JSONValue {
        var body: [String: JSONValue] = [
            "access_token": .string(accessToken), "token_type": .string(tokenType), "expires_in": .int(expiresIn),
            "scope": .string(scope),
        ]
        if let refreshToken { body["refresh_token"] = .string(refreshToken) }
        if let idToken { body["id_token"] = .string(idToken) }
        return .object(body)
    }

    package init(json: JSONValue) throws(WireError) {
        guard let access = json["access_token"]?.stringValue, !access.isEmpty,
            let type = json["token_type"]?.stringValue, !type.isEmpty,
            let expiresIn = json["expires_in"]?.intValue, expiresIn > 0
        else { throw WireError("the token response lacks access_token, token_type or expires_in") }
        accessToken = access
        tokenType = type
        self.expiresIn = expiresIn
        scope = json["scope"]?.stringValue ?? ""
        refreshToken = json["refresh_token"]?.stringValue
        idToken = json["id_token"]?.stringValue
    }
}

/// `POST /auth/device` (RFC 8628 §3.2).
package struct DeviceAuthorizationResponse: Sendable, Equatable {
    package var deviceCode: String
    package var userCode: String
    package var verificationURI: String
    package var verificationURIComplete: String?
    package var expiresIn: Int64
    /// Seconds between polls (RFC 8628 says 5 when absent).
    package var interval: Int64

    package init(
        deviceCode: String, userCode: String, verificationURI: String, verificationURIComplete: String?,
        expiresIn: Int64, interval: Int64
    ) {
        self.deviceCode = deviceCode
        self.userCode = userCode
        self.verificationURI = verificationURI
        self.verificationURIComplete = verificationURIComplete
        self.expiresIn = expiresIn
        self.interval = interval
    }

    package var json: JSONValue {
        var body: [String: JSONValue] = [
            "device_code": .string(deviceCode), "user_code": .string(userCode),
            "verification_uri": .string(verificationURI), "expires_in": .int(expiresIn), "interval": .int(interval),
        ]
        if let verificationURIComplete { body["verification_uri_complete"] = .string(verificationURIComplete) }
        return .object(body)
    }

    package init(json: JSONValue) throws(WireError) {
        guard let deviceCode = json["device_code"]?.stringValue, !deviceCode.isEmpty,
            let userCode = json["user_code"]?.stringValue,
            let uri = json["verification_uri"]?.stringValue,
            let expiresIn = json["expires_in"]?.intValue, expiresIn > 0
        else { throw WireError("the device authorization answer lacks device_code, user_code or expires_in") }
        self.deviceCode = deviceCode
        self.userCode = userCode
        verificationURI = uri
        verificationURIComplete = json["verification_uri_complete"]?.stringValue
        self.expiresIn = expiresIn
        interval = max(1, json["interval"]?.intValue ?? 5)
    }
}

/// `GET /auth/providers`: the ways in this broker offers.
package struct ProvidersResponse: Sendable, Equatable {
    package struct Entry: Sendable, Equatable {
        package var id: String
        package var name: String
        /// `browser`, `password` or `device`-capable flows, as the provider's descriptor says.
        package var flow: String

        package init(id: String, name: String, flow: String) {
            self.id = id
            self.name = name
            self.flow = flow
        }
    }

    package var providers: [Entry]

    package init(providers: [Entry]) { self.providers = providers }

    package var json: JSONValue {
        .object([
            "providers": .array(
                providers.map { ["id": .string($0.id), "name": .string($0.name), "flow": .string($0.flow)] })
        ])
    }

    package init(json: JSONValue) throws(WireError) {
        guard case .array(let entries)? = json["providers"] else {
            throw WireError("/auth/providers has no \"providers\" list")
        }
        var providers: [Entry] = []
        for entry in entries {
            guard let id = entry["id"]?.stringValue else { throw WireError("a provider without an id") }
            providers.append(
                Entry(id: id, name: entry["name"]?.stringValue ?? id, flow: entry["flow"]?.stringValue ?? "browser"))
        }
        self.providers = providers
    }
}

/// The contract's error document: `{"error", "error_description"}`.
package struct ErrorResponse: Sendable, Equatable {
    package var code: OAuthErrorCode
    package var description: String

    package init(code: OAuthErrorCode, description: String) {
        self.code = code
        self.description = description
    }

    package var json: JSONValue {
        .object(["error": .string(code.rawValue), "error_description": .string(description)])
    }

    /// `nil` for a document that is not an error document (no `error` string).
    package init?(json: JSONValue?) {
        guard let code = json?["error"]?.stringValue else { return nil }
        self.code = OAuthErrorCode(code)
        description = json?["error_description"]?.stringValue ?? ""
    }
}
