import BrokerStore
import Testing

/// The rotation rule both stores obey, without a database: each question in its order (a revoked session
/// outranks a wrong key, a wrong key outranks reuse — nothing is spent or revoked without the key —, reuse
/// outranks expiry).
@Suite("refresh-token rotation rule")
struct RotationRuleTests {
    static let now: Int64 = 1_000

    @Test(
        arguments: [
            // (revoked, bound key, proof key, used, expires at) → decision
            (nil, nil, nil, nil, 2_000, RotationRule.rotate),
            (nil, "k1", "k1", nil, 2_000, .rotate),
            (nil, nil, "k9", nil, 2_000, .rotate),
            (500, nil, nil, nil, 2_000, .revoked),
            (500, "k1", "k2", 900, 10, .revoked),
            (nil, "k1", nil, nil, 2_000, .boundToAnotherKey),
            (nil, "k1", "k2", 900, 10, .boundToAnotherKey),
            (nil, nil, nil, 900, 2_000, .reused),
            (nil, "k1", "k1", 900, 10, .reused),
            (nil, nil, nil, nil, 1_000, .expired),
            (nil, nil, nil, nil, 999, .expired),
        ] as [(Int64?, String?, String?, Int64?, Int64, RotationRule)])
    func eachQuestionInItsOrder(
        revokedAt: Int64?, bound: String?, proof: String?, usedAt: Int64?, expiresAt: Int64, expected: RotationRule
    ) {
        #expect(
            RotationRule.decide(
                revokedAt: revokedAt, boundKey: bound, proofKey: proof, usedAt: usedAt, expiresAt: expiresAt,
                now: Self.now) == expected)
    }
}

/// The device-poll rule both stores obey, without a database (RFC 8628 §3.5).
@Suite("device poll rule")
struct DevicePollRuleTests {
    @Test(
        arguments: [
            // (status, expires at, interval, last polled) at 1,000 → decision
            (DeviceStatus.pending, Int64(2_000), Int64(5), nil, DevicePollRule.pending),
            (DeviceStatus.pending, 2_000, 5, 996, .pending),
            (DeviceStatus.pending, 2_000, 5, 997, .slowDown(interval: 10)),
            (DeviceStatus.approved, 2_000, 10, 999, .slowDown(interval: 15)),
            (DeviceStatus.approved, 2_000, 5, 990, .approve),
            (DeviceStatus.denied, 2_000, 5, nil, .denied),
            (DeviceStatus.approved, 1_000, 5, nil, .expired),
            (DeviceStatus.spent, 2_000, 5, 999, .spent),
            (DeviceStatus.spent, 10, 5, nil, .spent),
        ] as [(String, Int64, Int64, Int64?, DevicePollRule)])
    func eachQuestionInItsOrder(
        status: String, expiresAt: Int64, interval: Int64, last: Int64?, expected: DevicePollRule
    ) {
        #expect(
            DevicePollRule.decide(
                status: status, expiresAt: expiresAt, interval: interval, lastPolledAt: last, now: 1_000)
                == expected)
    }
}
