/// The refresh-token rotation rule both dialects obey, as a pure decision from the presented token's row and
/// the time (RFC 9700 §4.14.2): the same questions, in the same order, whichever store asks them — so the
/// rule is written once and tested without a database.
///
/// 1. a revoked session: refused (`revoked`), nothing spent;
/// 2. a session bound to a DPoP key the request did not prove: refused (`boundToAnotherKey`), nothing spent —
///    a thief without the key cannot even burn the owner's token;
/// 3. a token already used: reuse — the store revokes the whole session;
/// 4. an expired token: refused (`expired`);
/// 5. otherwise the token is spent and its successor stored.
package enum RotationRule: Sendable, Equatable {
    case revoked
    case boundToAnotherKey
    case reused
    case expired
    case rotate

    package static func decide(
        revokedAt: Int64?, boundKey: String?, proofKey: String?, usedAt: Int64?, expiresAt: Int64, now: Int64
    ) -> RotationRule {
        if revokedAt != nil { return .revoked }
        if let boundKey, boundKey != proofKey { return .boundToAnotherKey }
        if usedAt != nil { return .reused }
        if expiresAt <= now { return .expired }
        return .rotate
    }
}
