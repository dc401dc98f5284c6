import BrokerCore
import BrokerPostgres
import BrokerStore
import BrokerTesting
import Foundation
import Logging
import Testing

/// A kind of store the contract suite runs against; each test gets a fresh, empty one.
///
/// A new store joins the contract suites by adding a case here: every test of every `…Contract` suite (one per
/// facet of the store) then runs against it.
enum StoreUnderTest: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case sqlite
    case postgres

    var testDescription: String { rawValue }

    /// Both stores: the PostgreSQL cases need the server `scripts/with-postgres.sh` starts (scripts/test.sh
    /// runs every suite inside it) and fail, saying so, without one.
    static var available: [StoreUnderTest] { allCases }

    func make() async throws -> any Store {
        switch self {
        case .sqlite:
            let directory = try TemporaryDirectory.make(prefix: "broker-store")
            return try SQLiteStore(path: directory.appendingPathComponent("broker.sqlite3").path)
        case .postgres:
            return try await Self.openPostgres(try await TestPostgres.freshDatabase())
        }
    }

    /// A PostgreSQL store on `url`, with the test cluster's password.
    static func openPostgres(_ url: String, poolSize: Int = 10) async throws -> PostgresStore {
        guard case .postgres(let location) = try DatabaseLocation.parse(url) else {
            throw TestSupportError("not a PostgreSQL URL: \(url)")
        }
        return try await PostgresStore.open(
            location, password: TestPostgres.password, poolSize: poolSize, deadline: .seconds(60),
            logger: Logger.test())
    }
}

/// Builders of records with unique ids, so that tests say only what matters to them.
enum Make {
    static let now: Int64 = 1_800_000_000

    static func user(
        _ provider: ProviderID = .custom, subject: String = UUID().uuidString.lowercased(),
        email: String? = nil, name: String? = nil, at time: Int64 = now
    ) -> UserRecord {
        UserRecord(id: UserID(provider: provider, subject: subject), email: email, name: name, createdAt: time)
    }

    /// A random 32-byte value: the store treats hashes as opaque.
    static func hash() -> [UInt8] { (0..<32).map { _ in UInt8.random(in: 0...255) } }

    static func session(
        for user: UserRecord, id: String = UUID().uuidString, at time: Int64 = now, signedInWith: ProviderID? = nil
    ) -> SessionRecord {
        SessionRecord(
            id: id, userID: user.id, clientID: "broker-cli", scope: "openid", createdAt: time, revokedAt: nil,
            signedInWith: signedInWith)
    }

    static func token(_ hash: [UInt8], session: String, at time: Int64 = now, lifetime: Int64 = 3600)
        -> RefreshTokenRecord
    {
        RefreshTokenRecord(hash: hash, sessionID: session, createdAt: time, expiresAt: time + lifetime)
    }

    /// A user with a session and its first refresh token, stored.
    static func signedIn(_ store: any Store, lifetime: Int64 = 3600) async throws
        -> (user: UserRecord, session: SessionRecord, token: [UInt8])
    {
        let user = try await store.providerUser(Make.user("google", email: "someone@example.com", name: "Someone"))
        let session = Make.session(for: user)
        let token = Make.hash()
        try await store.createSession(session, firstToken: Make.token(token, session: session.id, lifetime: lifetime))
        return (user, session, token)
    }
}

extension Store {
    /// Signs in the provider account `user` is made from (its id's provider and subject), as the browser flow
    /// does; the user it signs in as.
    func providerUser(_ user: UserRecord) async throws -> UserRecord {
        let identity = IdentityRecord(
            provider: user.id.provider, subject: user.id.subject, email: user.email, name: user.name)
        guard case .user(let signedIn) = try await signIn(identity, now: user.createdAt) else {
            throw StoreError.conflict("\(user.id) was unlinked from its user")
        }
        return signedIn
    }
}
