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
