package import BrokerCore

/// A device authorization (RFC 8628) as stored: the device code only as its SHA-256; the user code normalised
/// (eight letters, no hyphen).
package struct DeviceAuthorization: Sendable, Hashable {
    package var deviceCodeHash: [UInt8]
    package var userCode: String
    package var clientID: String
    /// The provider the CLI suggested (`--provider`), if any.
    package var provider: ProviderID?
    /// Where the request came from, shown to the person approving it (RFC 8628 §5.4).
    package var clientAddress: String?
    package var createdAt: Int64
    package var expiresAt: Int64
    /// Seconds the device must wait between polls (grows by 5 with each `slow_down`).
    package var interval: Int64
    /// `broker link --device`: the signed-in user the provider account is to be attached to; `nil` for a
    /// sign-in.
    package var linkUser: UserID?
    /// For a link: the session that asked for it (schema v12); the approval is refused once it has ended.
    package var linkSession: String?

    package init(
        deviceCodeHash: [UInt8], userCode: String, clientID: String, provider: ProviderID?, clientAddress: String?,
        createdAt: Int64, expiresAt: Int64, interval: Int64, linkUser: UserID? = nil, linkSession: String? = nil
    ) {
        self.linkSession = linkSession
        self.linkUser = linkUser
        self.deviceCodeHash = deviceCodeHash
        self.userCode = userCode
        self.clientID = clientID
        self.provider = provider
        self.clientAddress = clientAddress
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.interval = interval
    }
}

/// What one poll of a device code came to.
package enum DevicePoll: Sendable, Hashable {
    case unknown
    case expired
    /// Polled sooner than the interval allows; the interval is now `interval`.
    case slowDown(interval: Int64)
    case pending
    case denied
    /// Approved by `user`; the code is spent by this poll (a second one is ``spent``).
    case approved(UserID, signedInWith: ProviderID?)
    case spent
}

/// The device flow's state in the store, so that any broker can answer any poll or page.
package protocol DeviceStore: Sendable {
    /// Records a new authorization unless `maxPending` unexpired pending ones exist; `false` then. A user code
    /// already in use is a ``StoreError/conflict(_:)`` (the caller draws another).
    func createDeviceAuthorization(_ record: DeviceAuthorization, maxPending: Int, now: Int64) async throws -> Bool

    /// The pending, unexpired authorization with `userCode`.
    func pendingDeviceAuthorization(userCode: String, now: Int64) async throws -> DeviceAuthorization?

    /// Approves (`user` given) or denies (`nil`) a pending, unexpired authorization, once; `false` otherwise.
    /// `signedInWith` is the way in the approving person used; the session the approval starts records it.
    func decideDeviceAuthorization(userCode: String, user: UserID?, signedInWith: ProviderID?, now: Int64)
        async throws -> Bool

    /// One poll with the device code: pacing (`slow_down` adds 5 s; a poll up to one second early is
    /// tolerated), then the state; an approval is handed out once.
    func pollDeviceAuthorization(hash: [UInt8], now: Int64) async throws -> DevicePoll
}

/// The status column's values.
package enum DeviceStatus {
    package static let pending = "pending"
    package static let approved = "approved"
    package static let denied = "denied"
    package static let spent = "spent"
}
