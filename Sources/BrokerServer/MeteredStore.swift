import BrokerCore
import BrokerStore

/// A ``Store`` that times every call into `broker_store_call_duration_seconds{operation}` and forwards it to
/// the real store unchanged (results and errors alike).
final class MeteredStore: Store {
    let base: any Store
    let metrics: BrokerMetrics

    init(_ base: any Store, metrics: BrokerMetrics) {
        self.base = base
        self.metrics = metrics
    }

    private func timed<T>(_ operation: String, _ call: () async throws -> T) async throws -> T {
        let started = ContinuousClock.now
        defer { metrics.storeCall(operation, duration: ContinuousClock.now - started) }
        return try await call()
    }

    var isShared: Bool { base.isShared }
    func close() async { await base.close() }
    func ping() async throws { try await timed("ping") { try await base.ping() } }
    func schemaVersion() async throws -> Int { try await timed("schema_version") { try await base.schemaVersion() } }

    func createPasswordAccount(user: UserRecord, email: String, passwordHash: String, verifiedAt: Int64?)
        async throws
    {
        try await timed("create_password_account") {
            try await base.createPasswordAccount(
                user: user, email: email, passwordHash: passwordHash, verifiedAt: verifiedAt)
        }
    }
    func passwordAccount(email: String) async throws -> PasswordAccount? {
        try await timed("password_account") { try await base.passwordAccount(email: email) }
    }
    func updatePasswordHash(email: String, from old: String, to new: String) async throws {
        try await timed("update_password_hash") { try await base.updatePasswordHash(email: email, from: old, to: new) }
    }
    func signIn(_ identity: IdentityRecord, now: Int64) async throws -> IdentitySignIn {
        try await timed("identity_sign_in") { try await base.signIn(identity, now: now) }
    }
    func createDeviceAuthorization(_ record: DeviceAuthorization, maxPending: Int, now: Int64) async throws -> Bool {
        try await timed("create_device_authorization") {
            try await base.createDeviceAuthorization(record, maxPending: maxPending, now: now)
        }
    }
    func pendingDeviceAuthorization(userCode: String, now: Int64) async throws -> DeviceAuthorization? {
        try await timed("pending_device_authorization") {
            try await base.pendingDeviceAuthorization(userCode: userCode, now: now)
        }
    }
    func decideDeviceAuthorization(userCode: String, user: UserID?, signedInWith: ProviderID?, now: Int64)
        async throws -> Bool
    {
        try await timed("decide_device_authorization") {
            try await base.decideDeviceAuthorization(
                userCode: userCode, user: user, signedInWith: signedInWith, now: now)
        }
    }
    func pollDeviceAuthorization(hash: [UInt8], now: Int64) async throws -> DevicePoll {
        try await timed("poll_device_authorization") { try await base.pollDeviceAuthorization(hash: hash, now: now) }
    }
    func identities(user: UserID) async throws -> [LinkedIdentity] {
        try await timed("identities") { try await base.identities(user: user) }
    }
    func identityOwner(provider: ProviderID, subject: String) async throws -> UserID? {
        try await timed("identity_owner") { try await base.identityOwner(provider: provider, subject: subject) }
    }
    func linkIdentity(_ identity: IdentityRecord, to user: UserID, now: Int64) async throws -> LinkOutcome {
        try await timed("link_identity") { try await base.linkIdentity(identity, to: user, now: now) }
    }
    func addPasswordAccount(user: UserID, email: String, passwordHash: String, now: Int64) async throws
        -> PasswordLinkOutcome
    {
        try await timed("add_password_account") {
            try await base.addPasswordAccount(user: user, email: email, passwordHash: passwordHash, now: now)
        }
    }
    func releaseUnverifiedAddress(email: String, now: Int64) async throws -> ReleasedAddress? {
        try await timed("release_unverified_address") {
            try await base.releaseUnverifiedAddress(email: email, now: now)
        }
    }
    func unlinkIdentity(user: UserID, provider: ProviderID, now: Int64) async throws -> UnlinkOutcome {
        try await timed("unlink_identity") { try await base.unlinkIdentity(user: user, provider: provider, now: now) }
    }
    func user(id: UserID) async throws -> UserRecord? { try await timed("user") { try await base.user(id: id) } }
    func passwordAccount(user: UserID) async throws -> PasswordAccount? {
        try await timed("password_account") { try await base.passwordAccount(user: user) }
    }
    func createEmailLink(hash: [UInt8], user: UserID, purpose: String, expiresAt: Int64, now: Int64) async throws {
        try await timed("create_email_link") {
            try await base.createEmailLink(hash: hash, user: user, purpose: purpose, expiresAt: expiresAt, now: now)
        }
    }
    func emailLinkUser(hash: [UInt8], purpose: String, now: Int64) async throws -> UserRecord? {
        try await timed("email_link_user") { try await base.emailLinkUser(hash: hash, purpose: purpose, now: now) }
    }
    func resetPassword(linkHash: [UInt8], passwordHash: String, now: Int64) async throws -> UserID? {
        try await timed("reset_password") {
            try await base.resetPassword(linkHash: linkHash, passwordHash: passwordHash, now: now)
        }
    }
    func verifyEmail(linkHash: [UInt8], now: Int64) async throws -> UserID? {
        try await timed("verify_email") { try await base.verifyEmail(linkHash: linkHash, now: now) }
    }
    func changePassword(user: UserID, from old: String, to new: String, keepingSession: String?, now: Int64)
        async throws -> Bool
    {
        try await timed("change_password") {
            try await base.changePassword(user: user, from: old, to: new, keepingSession: keepingSession, now: now)
        }
    }
    func createSession(_ session: SessionRecord, firstToken: RefreshTokenRecord) async throws {
        try await timed("create_session") { try await base.createSession(session, firstToken: firstToken) }
    }
    func rotateRefreshToken(hash: [UInt8], nextHash: [UInt8], nextExpiresAt: Int64, now: Int64, proofKey: String?)
        async throws -> RotationOutcome
    {
        try await timed("rotate_refresh_token") {
            try await base.rotateRefreshToken(
                hash: hash, nextHash: nextHash, nextExpiresAt: nextExpiresAt, now: now, proofKey: proofKey)
        }
    }
    func revokeSession(byRefreshTokenHash hash: [UInt8], now: Int64) async throws -> Bool {
        try await timed("revoke_session") { try await base.revokeSession(byRefreshTokenHash: hash, now: now) }
    }
    func revokeSession(id: String, now: Int64) async throws -> Bool {
        try await timed("revoke_session") { try await base.revokeSession(id: id, now: now) }
    }
    func session(id: String) async throws -> SessionRecord? {
        try await timed("session") { try await base.session(id: id) }
    }
    func sessionWithUser(id: String) async throws -> SessionView? {
        try await timed("session_with_user") { try await base.sessionWithUser(id: id) }
    }
    func purge(expiredBefore before: Int64) async throws {
        try await timed("purge") { try await base.purge(expiredBefore: before) }
    }

    func createClient(_ client: ClientRecord) async throws {
        try await timed("create_client") { try await base.createClient(client) }
    }
    func client(name: String) async throws -> ClientRecord? {
        try await timed("client") { try await base.client(name: name) }
    }
    func clients() async throws -> [ClientRecord] { try await timed("clients") { try await base.clients() } }
    func deleteClient(name: String) async throws -> Bool {
        try await timed("delete_client") { try await base.deleteClient(name: name) }
    }
    func recordExchange(issuer: String, jti: String, expiresAt: Int64) async throws -> Bool {
        try await timed("record_exchange") {
            try await base.recordExchange(issuer: issuer, jti: jti, expiresAt: expiresAt)
        }
    }

    func createAuthorizationCode(_ code: AuthorizationCodeRecord) async throws {
        try await timed("create_authorization_code") { try await base.createAuthorizationCode(code) }
    }
    func redeemAuthorizationCode(hash: [UInt8], now: Int64) async throws -> CodeRedemption {
        try await timed("redeem_authorization_code") { try await base.redeemAuthorizationCode(hash: hash, now: now) }
    }
    func attachSession(toCode hash: [UInt8], sessionID: String) async throws {
        try await timed("attach_session") { try await base.attachSession(toCode: hash, sessionID: sessionID) }
    }
    func spendStateMarker(_ marker: String, expiresAt: Int64) async throws -> Bool {
        try await timed("spend_state_marker") { try await base.spendStateMarker(marker, expiresAt: expiresAt) }
    }
    func isStateMarkerSpent(_ marker: String) async throws -> Bool {
        try await timed("state_marker") { try await base.isStateMarkerSpent(marker) }
    }

    func signingKeys() async throws -> [StoredSigningKey] {
        try await timed("signing_keys") { try await base.signingKeys() }
    }
    func addFirstSigningKey(_ key: StoredSigningKey) async throws -> Bool {
        try await timed("add_signing_key") { try await base.addFirstSigningKey(key) }
    }
    func rotateSigningKey(to key: StoredSigningKey, now: Int64, dropRetiredBefore: Int64) async throws {
        try await timed("rotate_signing_key") {
            try await base.rotateSigningKey(to: key, now: now, dropRetiredBefore: dropRetiredBefore)
        }
    }
    func secretKey(name: String, orInsert sealed: String, now: Int64) async throws -> String {
        try await timed("secret_key") { try await base.secretKey(name: name, orInsert: sealed, now: now) }
    }
    func replaceSecretKey(name: String, expected: String, with sealed: String) async throws -> Bool {
        try await timed("replace_secret_key") {
            try await base.replaceSecretKey(name: name, expected: expected, with: sealed)
        }
    }
    func secretKey(name: String) async throws -> String? {
        try await timed("secret_key") { try await base.secretKey(name: name) }
    }
    func rateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double, take: Bool) async throws
        -> Double?
    {
        try await timed("rate_limit") {
            try await base.rateLimit(name, key: key, bucket: bucket, now: now, take: take)
        }
    }
    func refundRateLimit(_ name: String, key: String, bucket: TokenBucket, now: Double) async throws {
        try await timed("rate_limit_refund") {
            try await base.refundRateLimit(name, key: key, bucket: bucket, now: now)
        }
    }

    func updateThrottle<T: Sendable>(
        keys: [String], _ body: @escaping @Sendable (inout [String: ThrottleEntry]) -> T
    ) async throws -> T {
        try await timed("update_throttle") { try await base.updateThrottle(keys: keys, body) }
    }

    func users(provider: ProviderID?) async throws -> [UserStatus] {
        try await timed("users") { try await base.users(provider: provider) }
    }
    func userStatus(id: UserID) async throws -> UserStatus? {
        try await timed("user_status") { try await base.userStatus(id: id) }
    }
    func setUserDisabled(id: UserID, disabled: Bool, now: Int64) async throws -> Bool {
        try await timed("set_user_disabled") { try await base.setUserDisabled(id: id, disabled: disabled, now: now) }
    }
    func deleteUser(id: UserID, now: Int64) async throws -> Bool {
        try await timed("delete_user") { try await base.deleteUser(id: id, now: now) }
    }
    func sessions(user: UserID?) async throws -> [SessionRecord] {
        try await timed("sessions") { try await base.sessions(user: user) }
    }
    func revokeSessions(user: UserID, now: Int64) async throws -> Int {
        try await timed("revoke_sessions") { try await base.revokeSessions(user: user, now: now) }
    }

    func appendAuditEvent(_ event: AuditEventRecord) async throws {
        try await timed("append_audit_event") { try await base.appendAuditEvent(event) }
    }
    @discardableResult func purgeAuditEvents(before: Int64) async throws -> Int {
        try await timed("purge_audit_events") { try await base.purgeAuditEvents(before: before) }
    }
    func auditEvents(user: UserID?, since: Int64?, limit: Int) async throws -> [AuditEventRecord] {
        try await timed("audit_events") { try await base.auditEvents(user: user, since: since, limit: limit) }
    }

    func exportRows(_ table: Schema.Table) async throws -> [[StoreValue]] {
        try await timed("export_rows") { try await base.exportRows(table) }
    }
    func importRows(_ tables: [(Schema.Table, [[StoreValue]])]) async throws {
        try await timed("import_rows") { try await base.importRows(tables) }
    }
    func count(_ table: Schema.Table) async throws -> Int { try await timed("count") { try await base.count(table) } }

    // MARK: Apps (the OpenID Provider)

    func createApp(_ app: AppRecord) async throws { try await timed("create_app") { try await base.createApp(app) } }
    func app(clientID: String) async throws -> AppRecord? {
        try await timed("app") { try await base.app(clientID: clientID) }
    }
    func apps() async throws -> [AppRecord] { try await timed("apps") { try await base.apps() } }
    func deleteApp(clientID: String, now: Int64) async throws -> [String]? {
        try await timed("delete_app") { try await base.deleteApp(clientID: clientID, now: now) }
    }
    func createBrowserSession(_ session: BrowserSessionRecord, cookieHash: [UInt8]) async throws {
        try await timed("create_browser_session") {
            try await base.createBrowserSession(session, cookieHash: cookieHash)
        }
    }
    func browserSession(cookieHash: [UInt8], now: Int64) async throws -> BrowserSessionRecord? {
        try await timed("browser_session") { try await base.browserSession(cookieHash: cookieHash, now: now) }
    }
    func browserSessions(user: UserID?) async throws -> [BrowserSessionRecord] {
        try await timed("browser_sessions") { try await base.browserSessions(user: user) }
    }
    func endBrowserSession(id: String, now: Int64) async throws -> [String] {
        try await timed("end_browser_session") { try await base.endBrowserSession(id: id, now: now) }
    }
    @discardableResult func revokeBrowserSession(id: String, now: Int64) async throws -> Bool {
        try await timed("revoke_browser_session") { try await base.revokeBrowserSession(id: id, now: now) }
    }
    func consent(user: UserID, clientID: String) async throws -> [String]? {
        try await timed("consent") { try await base.consent(user: user, clientID: clientID) }
    }
    func recordConsent(user: UserID, clientID: String, scopes: [String], now: Int64) async throws {
        try await timed("record_consent") {
            try await base.recordConsent(user: user, clientID: clientID, scopes: scopes, now: now)
        }
    }
    func refreshToken(hash: [UInt8]) async throws -> (token: RefreshTokenRecord, spent: Bool)? {
        try await timed("refresh_token") { try await base.refreshToken(hash: hash) }
    }
    func createAppCode(_ code: AppCodeRecord) async throws {
        try await timed("create_app_code") { try await base.createAppCode(code) }
    }
    func redeemAppCode(hash: [UInt8], now: Int64) async throws -> AppCodeRedemption {
        try await timed("redeem_app_code") { try await base.redeemAppCode(hash: hash, now: now) }
    }
    func attachSession(_ session: String, toAppCode hash: [UInt8], now: Int64) async throws {
        try await timed("attach_app_code_session") { try await base.attachSession(session, toAppCode: hash, now: now) }
    }
    func claimLogoutDeliveries(now: Int64, limit: Int) async throws -> [LogoutDelivery] {
        try await timed("claim_logout_deliveries") { try await base.claimLogoutDeliveries(now: now, limit: limit) }
    }
    func finishLogoutDelivery(id: String) async throws {
        try await timed("finish_logout_delivery") { try await base.finishLogoutDelivery(id: id) }
    }
    func retryLogoutDelivery(id: String, at: Int64) async throws {
        try await timed("retry_logout_delivery") { try await base.retryLogoutDelivery(id: id, at: at) }
    }
    func pendingLogoutDeliveries() async throws -> Int {
        try await timed("pending_logout_deliveries") { try await base.pendingLogoutDeliveries() }
    }
    func createPushedRequest(_ request: PushedRequestRecord, hash: [UInt8]) async throws {
        try await timed("create_pushed_request") { try await base.createPushedRequest(request, hash: hash) }
    }
    func takePushedRequest(hash: [UInt8], now: Int64) async throws -> PushedRequestRecord? {
        try await timed("take_pushed_request") { try await base.takePushedRequest(hash: hash, now: now) }
    }

    func passkeyHandle(user: UserID, orInsert candidate: String) async throws -> String {
        try await timed("passkey_handle") { try await base.passkeyHandle(user: user, orInsert: candidate) }
    }
    func passkeyUser(handle: String) async throws -> UserID? {
        try await timed("passkey_user") { try await base.passkeyUser(handle: handle) }
    }
    func addPasskey(_ passkey: PasskeyRecord) async throws {
        try await timed("add_passkey") { try await base.addPasskey(passkey) }
    }
    func passkey(id: String) async throws -> PasskeyRecord? {
        try await timed("passkey") { try await base.passkey(id: id) }
    }
    func passkeys(user: UserID) async throws -> [PasskeyRecord] {
        try await timed("passkeys") { try await base.passkeys(user: user) }
    }
    func recordPasskeyUse(id: String, signCount: Int64, backedUp: Bool, now: Int64) async throws -> PasskeyUse {
        try await timed("record_passkey_use") {
            try await base.recordPasskeyUse(id: id, signCount: signCount, backedUp: backedUp, now: now)
        }
    }
    func removePasskey(id: String, user: UserID, now: Int64) async throws -> PasskeyRemoval {
        try await timed("remove_passkey") { try await base.removePasskey(id: id, user: user, now: now) }
    }
    func recoveryAddress(user: UserID) async throws -> RecoveryAddress? {
        try await timed("recovery_address") { try await base.recoveryAddress(user: user) }
    }
    func passkeyRecoveryUser(email: String) async throws -> UserRecord? {
        try await timed("passkey_recovery_user") { try await base.passkeyRecoveryUser(email: email) }
    }
    func recoverWithPasskey(linkHash: [UInt8], user: UserID, now: Int64) async throws -> Bool {
        try await timed("recover_with_passkey") {
            try await base.recoverWithPasskey(linkHash: linkHash, user: user, now: now)
        }
    }
}
