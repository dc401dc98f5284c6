import BrokerCore
import BrokerStore
import BrokerTesting
import Foundation
import Synchronization
import Testing

/// Each store reports every call's duration from its own choke points, under the operation's name — the
/// same names on both dialects, one report per call (a batched PostgreSQL read included), nothing before an
/// observer is set.
@Suite("Store contract: call timing")
struct StoreObserverContract {
    final class Recorder: StoreObserver {
        let calls = Mutex<[String]>([])
        func storeCall(_ operation: String, duration: Duration) {
            #expect(duration >= .zero)
            calls.withLock { $0.append(operation) }
        }
        func take() -> [String] {
            calls.withLock { calls in
                defer { calls = [] }; return calls
            }
        }
    }

    @Test(arguments: StoreUnderTest.available)
    func everyCallIsReportedOnceUnderItsOperationName(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let recorder = Recorder()
        let user = try await store.providerUser(Make.user("google"))
        #expect(recorder.take().isEmpty, "nothing is reported before an observer is set")
        store.observe(recorder)

        let session = Make.session(for: user)
        let first = Make.hash()
        try await store.createSession(session, firstToken: Make.token(first, session: session.id))
        #expect(recorder.take() == ["create_session"])
        _ = try await store.sessionWithUser(id: session.id)
        _ = try await store.rotateRefreshToken(
            hash: first, nextHash: Make.hash(), nextExpiresAt: Make.now + 60, now: Make.now + 1)
        #expect(recorder.take() == ["session_with_user", "rotate_refresh_token"])
        _ = try await store.passwordAccount(email: "nobody@example.com")
        _ = try await store.spendStateMarker("m-\(UUID())", expiresAt: Make.now + 60)
        _ = try await store.signIn(
            IdentityRecord(provider: "google", subject: "s-\(UUID())", email: nil, name: nil), now: 1)
        _ = try await store.passkeys(user: user.id)
        #expect(
            recorder.take() == ["password_account", "spend_state_marker", "identity_sign_in", "passkeys"],
            "a helper reports under the method that called it; renamed operations keep their old names")

        // Reads that PostgreSQL answers together (one query for many ids) are reported one per caller.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<8 { group.addTask { _ = try await store.sessionWithUser(id: session.id) } }
            try await group.waitForAll()
        }
        #expect(recorder.take() == Array(repeating: "session_with_user", count: 8))
    }

    @Test func operationNamesAreTheMethodsInSnakeCase() {
        #expect(
            StoreObservation.operation("rotateRefreshToken(hash:nextHash:nextExpiresAt:now:proofKey:)")
                == "rotate_refresh_token")
        #expect(StoreObservation.operation("passkeys(user:)") == "passkeys")
        #expect(StoreObservation.operation("signIn(_:now:)") == "identity_sign_in")
        #expect(StoreObservation.operation("ping()") == "ping")
    }
}
