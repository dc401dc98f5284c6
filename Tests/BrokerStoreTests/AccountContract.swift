import BrokerCore
import BrokerStore
import Testing

/// The store contract for accounts and users: written against the ``Store`` protocol alone, run against each store
/// in ``StoreUnderTest``.
@Suite("Store contract: accounts and users")
struct AccountContract {
    @Test(arguments: StoreUnderTest.available)
    func pingAnswers(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        try await store.ping()
    }

    @Test(arguments: StoreUnderTest.available)
    func passwordAccountRoundTrip(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let user = Make.user(email: "ada@example.com", name: "Ada")
        try await store.createPasswordAccount(user: user, email: "ada@example.com", passwordHash: "$scrypt$one")
        let account = try #require(try await store.passwordAccount(email: "ada@example.com"))
        #expect(account.email == "ada@example.com")
        #expect(account.passwordHash == "$scrypt$one")
        #expect(account.user == user)
        #expect(try await store.user(id: user.id) == user)
        #expect(try await store.passwordAccount(email: "nobody@example.com") == nil)
        #expect(try await store.passwordAccount(email: "ADA@example.com") == nil, "emails are matched as given")
    }

    @Test(arguments: StoreUnderTest.available)
    func secondAccountForAnEmailIsAConflictAndWritesNothing(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let first = Make.user(email: "ada@example.com")
        try await store.createPasswordAccount(user: first, email: "ada@example.com", passwordHash: "h1")
        let second = Make.user(email: "ada@example.com")
        await #expect {
            try await store.createPasswordAccount(user: second, email: "ada@example.com", passwordHash: "h2")
        } throws: { error in
            (error as? StoreError)?.code == .conflict
        }
        #expect(try await store.user(id: second.id) == nil, "the losing user row is not left behind")
        #expect(try await store.passwordAccount(email: "ada@example.com")?.passwordHash == "h1")
    }

    @Test(arguments: StoreUnderTest.available)
    func fiftyConcurrentRegistrationsOfOneEmailMakeOneAccount(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let users = (0..<50).map { _ in Make.user(email: "race@example.com") }
        let outcomes = await withTaskGroup(of: String.self) { group in
            for (index, user) in users.enumerated() {
                group.addTask {
                    do {
                        try await store.createPasswordAccount(
                            user: user, email: "race@example.com", passwordHash: "h\(index)")
                        return "created"
                    } catch let error as StoreError where error.code == .conflict {
                        return "conflict"
                    } catch {
                        return "other: \(error)"
                    }
                }
            }
            return await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 == "created" }.count == 1)
        #expect(outcomes.filter { $0 == "conflict" }.count == 49, "\(outcomes.filter { $0.hasPrefix("other") })")
        let account = try #require(try await store.passwordAccount(email: "race@example.com"))
        var existing = 0
        for user in users where try await store.user(id: user.id) != nil { existing += 1 }
        #expect(existing == 1, "exactly one user row: the account's")
        #expect(users.contains { $0.id == account.user.id })
    }

    @Test(arguments: StoreUnderTest.available)
    func passwordHashIsReplacedOnlyFromTheHashItWasReadAs(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        try await store.createPasswordAccount(user: Make.user(), email: "a@example.com", passwordHash: "old")
        try await store.updatePasswordHash(email: "a@example.com", from: "stale", to: "rehash")
        #expect(try await store.passwordAccount(email: "a@example.com")?.passwordHash == "old", "compare-and-set")
        try await store.updatePasswordHash(email: "a@example.com", from: "old", to: "new")
        #expect(try await store.passwordAccount(email: "a@example.com")?.passwordHash == "new")
        try await store.updatePasswordHash(email: "nobody@example.com", from: "old", to: "new")
        #expect(try await store.passwordAccount(email: "nobody@example.com") == nil, "no account is created")
    }

    @Test(arguments: StoreUnderTest.available)
    func aProviderSignInCreatesThenFollowsTheProviderKeepingCreation(kind: StoreUnderTest) async throws {
        let store = try await kind.make()
        let created = try await store.providerUser(
            Make.user("google", subject: "1234", email: "a@example.com", name: "A", at: 100))
        #expect(created.createdAt == 100 && created.email == "a@example.com" && created.name == "A")
        let updated = try await store.providerUser(
            Make.user("google", subject: "1234", email: "b@example.com", name: nil, at: 200))
        #expect(updated.id == created.id)
        #expect(updated.email == "b@example.com", "the address follows the provider")
        #expect(updated.name == "A", "a name the provider no longer sends is kept (Apple sends it once)")
        #expect(updated.createdAt == 100, "the first sign-in's time stays")
        #expect(try await store.user(id: created.id) == updated)
        let renamed = try await store.providerUser(
            Make.user("google", subject: "1234", email: "b@example.com", name: "B", at: 300))
        #expect(renamed.name == "B", "a name the provider sends follows it")
        let other = try await store.providerUser(Make.user("facebook", subject: "1234"))
        #expect(other.id != created.id, "the same subject at another provider is another user")
        #expect(try await store.user(id: UserID(provider: "twitter", subject: "1234")) == nil)
    }
}
