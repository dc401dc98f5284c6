import BrokerCore
import BrokerCrypto
import BrokerServer
import BrokerStore
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// `POST /auth/link`, the ticket it gives, and the attach at redemption, against the scripted Google of
/// ``InProcessBrowserFlowTests`` on the manual clock: who may link, what a stolen ticket or start URL is
/// worth, and that bad input changes nothing.
@Suite("account linking in process")
struct InProcessLinkTests {
    typealias Flow = InProcessBrowserFlowTests
    static let password = "correct horse battery staple"
    static let config = """
        {"providers": {"google": {"client_id": "our-client", "client_secret": "s3cret", "issuer": "\(Flow.issuer)"},
                       "microsoftaccount": {"client_id": "ms", "client_secret": "s", "issuer": "\(Flow.issuer)"},
                       "custom": {"enabled": true}}}
        """

    /// A custom user's account token (what linking asks for) and id.
    static func ada(_ client: InProcessBroker.Client) async throws -> (token: String, user: UserID) {
        let registered = try await client.register("ada@example.com", password)
        #expect(registered.status == 201)
        return (
            try await client.accountToken(registered),
            try #require(registered["user_id"]?.stringValue.flatMap(UserID.init))
        )
    }

    static func ticket(_ client: InProcessBroker.Client, bearer: String?, _ body: JSONValue) async throws
        -> InProcessBroker.Client.Reply
    {
        var headers: HTTPFields = [.contentType: "application/json"]
        if let bearer { headers[.authorization] = "Bearer \(bearer)" }
        return try await client.send(.post, "/auth/link", headers: headers, body: Array(body.serialized().utf8))
    }

    /// A Google link ticket for `challenge`, asked for with the account token `bearer`.
    static func googleTicket(_ client: InProcessBroker.Client, bearer: String, challenge: String) async throws
        -> String
    {
        try #require(
            try await ticket(client, bearer: bearer, ["provider": "google", "code_challenge": .string(challenge)])[
                "link_ticket"]?.stringValue)
    }

    static func start(_ client: InProcessBroker.Client, provider: String = "google", challenge: String, ticket: String)
        async throws -> InProcessBroker.Client.Reply
    {
        try await client.get(
            "/auth/\(provider)/start?"
                + FormEncoding.encode([
                    ("redirect_uri", Flow.redirect), ("state", "cli-state"), ("code_challenge", challenge),
                    ("code_challenge_method", "S256"), ("link_ticket", ticket),
                ]))
    }

    @Test func theIdentityIsAttachedOnlyWhenTheLinkingCLIRedeemsItsCode() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        let google = try Flow.ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        let pkce = try PKCE.generate()
        try await broker.test { client in
            let (token, ada) = try await Self.ada(client)
            let issued = try await Self.ticket(
                client, bearer: token, ["provider": "google", "code_challenge": .string(pkce.challenge)])
            #expect(issued.status == 200 && issued["expires_in"]?.intValue == 600)
            #expect(issued.header("Cache-Control") == "no-store")
            let ticket = try #require(issued["link_ticket"]?.stringValue)
            #expect(!ticket.contains(token) && !ticket.contains(ada.subject), "sealed, not readable")

            let started = try await Self.start(client, challenge: pkce.challenge, ticket: ticket)
            #expect(started.status == 302)
            let location = try #require(started.header("Location"))
            let state = try #require(Flow.query(location)["state"])
            google.answerTokens(subject: "1045", nonce: try #require(Flow.query(location)["nonce"]))
            let back = try await Flow.callback(client, state: state)
            let code = try #require(back["code"])
            #expect(
                try await broker.store.identityOwner(provider: "google", subject: "1045") == nil,
                "the callback alone attaches nothing: whoever holds the start URL lacks the verifier")

            let wrongVerifier = try await client.form(
                "/auth/token",
                [
                    ("grant_type", "authorization_code"), ("code", code),
                    ("code_verifier", String(repeating: "a", count: 43)), ("redirect_uri", Flow.redirect),
                ])
            #expect(wrongVerifier.error == "invalid_grant")
            #expect(try await broker.store.identityOwner(provider: "google", subject: "1045") == nil)
        }
    }

    @Test func aLinkSignInAttachesAndSignsInAsTheSameUser() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        let google = try Flow.ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        let pkce = try PKCE.generate()
        try await broker.test { client in
            let (token, ada) = try await Self.ada(client)
            let ticket = try await Self.googleTicket(client, bearer: token, challenge: pkce.challenge)
            let started = try await Self.start(client, challenge: pkce.challenge, ticket: ticket)
            let location = try #require(started.header("Location"))
            google.answerTokens(subject: "1045", nonce: try #require(Flow.query(location)["nonce"]))
            let code = try #require(try await Flow.callback(client, state: Flow.query(location)["state"]!)["code"])
            let session = try await client.form(
                "/auth/token",
                [
                    ("grant_type", "authorization_code"), ("code", code), ("code_verifier", pkce.verifier),
                    ("redirect_uri", Flow.redirect),
                ])
            #expect(session.status == 200 && session["user_id"]?.stringValue == ada.description)
            #expect(try await broker.store.identityOwner(provider: "google", subject: "1045") == ada)
            let listed = try await client.get("/auth/identities", bearer: token)
            #expect(listed["identities"]?.arrayValue?.map { $0["provider"]?.stringValue } == ["custom", "google"])

            // A plain Google sign-in now ends as Ada.
            let again = try PKCE.generate()
            let (state, nonce) = try await Flow.start(client, pkce: again)
            google.answerTokens(subject: "1045", nonce: nonce)
            let signIn = try await Flow.callback(client, state: state)
            let second = try await client.form(
                "/auth/token",
                [
                    ("grant_type", "authorization_code"), ("code", try #require(signIn["code"])),
                    ("code_verifier", again.verifier), ("redirect_uri", Flow.redirect),
                ])
            #expect(second["user_id"]?.stringValue == ada.description)
            #expect(try await broker.store.user(id: UserID(provider: "google", subject: "1045")) == nil)
        }
    }

    @Test func ticketsAreBoundToTheirProviderChallengeAndTime() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        _ = try Flow.ScriptedGoogle(transport: broker.transport, clock: broker.clock)
        let pkce = try PKCE.generate()
        try await broker.test { client in
            let (token, _) = try await Self.ada(client)
            let ticket = try await Self.googleTicket(client, bearer: token, challenge: pkce.challenge)

            let otherChallenge = try await Self.start(client, challenge: try PKCE.generate().challenge, ticket: ticket)
            #expect(otherChallenge.status == 400)
            #expect(otherChallenge["error_description"]?.stringValue?.contains("another sign-in") == true)
            let otherProvider = try await Self.start(
                client, provider: "microsoftaccount", challenge: pkce.challenge, ticket: ticket)
            #expect(otherProvider.status == 400 && otherProvider.error == "invalid_request")
            var bytes = Array(ticket.utf8)
            bytes[bytes.count / 2] = bytes[bytes.count / 2] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            let tampered = try await Self.start(
                client, challenge: pkce.challenge, ticket: String(decoding: bytes, as: UTF8.self))
            #expect(tampered.status == 400)
            #expect(try await Self.start(client, challenge: pkce.challenge, ticket: ticket).status == 302)
            broker.clock.advance(by: 601)
            let late = try await Self.start(client, challenge: pkce.challenge, ticket: ticket)
            #expect(late.status == 400 && late["error_description"]?.stringValue?.contains("expired") == true)
        }
    }

    @Test func badLinkAndUnlinkRequestsAreRefusedAndChangeNothing() async throws {
        let broker = try await InProcessBroker(config: Self.config)
        let challenge = try PKCE.generate().challenge
        try await broker.test { client in
            let (token, ada) = try await Self.ada(client)
            let noBearer = try await Self.ticket(
                client, bearer: nil, ["provider": "google", "code_challenge": .string(challenge)])
            #expect(noBearer.status == 401 && noBearer.header("WWW-Authenticate")?.contains("invalid_token") == true)
            #expect(try await client.get("/auth/identities").status == 401)
            let cases: [(JSONValue, Int, String)] = [
                (["provider": "myspace"], 404, "not_found"),
                (["code_challenge": .string(challenge)], 400, "invalid_request"),
                (["provider": "facebook", "code_challenge": .string(challenge)], 404, "not_found"),
                (["provider": "google"], 400, "invalid_request"),
                (["provider": "google", "code_challenge": "short"], 400, "invalid_request"),
                (
                    ["provider": "custom", "email": "not an address", "password": .string(Self.password)], 400,
                    "invalid_request"
                ),
                (["provider": "custom", "email": "n@example.com", "password": "short"], 400, "invalid_request"),
                (
                    ["provider": "custom", "email": "n@example.com", "password": .string(Self.password)], 409,
                    "already_linked"
                ),
            ]
            for (body, status, code) in cases {
                let reply = try await Self.ticket(client, bearer: token, body)
                #expect(reply.status == status && reply.error == code, "\(body.serialized()): \(reply.status)")
            }
            let malformed = try await client.send(
                .post, "/auth/link", headers: [.contentType: "application/json", .authorization: "Bearer \(token)"],
                body: Array("{\"provider\":".utf8))
            #expect(malformed.status == 400 && malformed.error == "invalid_request")

            let unlinks: [(JSONValue, Int, String)] = [
                (["provider": "google"], 404, "not_found"), (["provider": "custom"], 409, "last_identity"),
                (["provider": "myspace"], 404, "not_found"), ([:], 400, "invalid_request"),
            ]
            for (body, status, code) in unlinks {
                let reply = try await client.send(
                    .post, "/auth/unlink",
                    headers: [.contentType: "application/json", .authorization: "Bearer \(token)"],
                    body: Array(body.serialized().utf8))
                #expect(reply.status == status && reply.error == code, "\(body.serialized()): \(reply.status)")
            }
            #expect(try await broker.store.identities(user: ada).isEmpty)
            #expect(try await broker.store.passwordAccount(user: ada)?.email == "ada@example.com")
            #expect(try await client.login("ada@example.com", Self.password).status == 200, "the password still works")
        }
    }
}
