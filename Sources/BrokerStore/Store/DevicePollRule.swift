/// What one poll of a device code decides (RFC 8628 §3.5), written once for both stores and tested without a
/// database: a spent code is spent, an expired one expired; a poll sooner than the interval allows (one second
/// of leeway for clocks and networks) gets `slow_down` and five more seconds; then the authorization's status —
/// approved (spent now, once), denied, or still pending.
package enum DevicePollRule: Sendable, Equatable {
    case spent
    case expired
    /// Slow down: the new interval, stored with this poll's time.
    case slowDown(interval: Int64)
    /// Approved: spend it now.
    case approve
    case denied
    /// Still waiting: record this poll's time.
    case pending

    package static func decide(status: String, expiresAt: Int64, interval: Int64, lastPolledAt: Int64?, now: Int64)
        -> DevicePollRule
    {
        if status == DeviceStatus.spent { return .spent }
        if now >= expiresAt { return .expired }
        if let lastPolledAt, now - lastPolledAt < interval - 1 { return .slowDown(interval: interval + 5) }
        switch status {
        case DeviceStatus.approved: return .approve
        case DeviceStatus.denied: return .denied
        default: return .pending
        }
    }
}
