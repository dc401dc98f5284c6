import BrokerCore
import BrokerTesting
import ProviderSupport
import Testing
import Twitter

/// RFC 5849 signing against the RFC's own worked examples and X's documented one
/// (../shared/vectors/README.md, recomputed with OpenSSL).
@Suite("OAuth 1.0a signatures (RFC 5849)")
struct OAuth1Tests {
    static let consumerKey = "dpf43f3p2l4k3l03"
    static let consumerSecret = Secret("kd94hf93k423kf44")

    func sign(
        _ method: String, _ url: String, token: String? = nil, tokenSecret: String? = nil,
        extra: [(String, String)], nonce: String, timestamp: Int64
    ) throws -> String {
        // RFC 5849 §1.2's requests carry no oauth_version; build the parameters as it does.
        var oauth: [(String, String)] = [
            ("oauth_consumer_key", Self.consumerKey), ("oauth_signature_method", "HMAC-SHA1"),
            ("oauth_timestamp", String(timestamp)), ("oauth_nonce", nonce),
        ]
        if let token { oauth.append(("oauth_token", token)) }
        oauth += extra
        let base = try #require(OAuth1.signatureBaseString(method: method, url: url, parameters: oauth))
        return OAuth1.signature(
            baseString: base, consumerSecret: Self.consumerSecret, tokenSecret: tokenSecret.map(Secret.init))
    }

    @Test func rfc5849Section1_2Examples() throws {
        #expect(
            try sign(
                "POST", "https://photos.example.net/initiate",
                extra: [("oauth_callback", "http://printer.example.com/ready")], nonce: "wIjqoS", timestamp: 137_131_200
            )
                == "74KNZJeDHnMBp0EMJ9ZHt/XKycU=")
        #expect(
            try sign(
                "POST", "https://photos.example.net/token", token: "hh5s93j4hdidpola", tokenSecret: "hdhd0244k9j7ao03",
                extra: [("oauth_verifier", "hfdp7dh39dks9884")], nonce: "walatlh", timestamp: 137_131_201)
                == "gKgrFCywp7rO0OXSjdot/IHF7IU=")
        #expect(
            try sign(
                "GET", "http://photos.example.net/photos?file=vacation.jpg&size=original", token: "nnch734d00sl2jdk",
                tokenSecret: "pfkkdhi9sl3r4s00", extra: [], nonce: "chapoH", timestamp: 137_131_202)
                == "MdpQcU8iPSUjWoN/UDMsK2sui9I=")
        // Signing the https /initiate request as http is a classic bug: a different signature.
        #expect(
            try sign(
                "POST", "http://photos.example.net/initiate",
                extra: [("oauth_callback", "http://printer.example.com/ready")], nonce: "wIjqoS", timestamp: 137_131_200
            )
                == "mIPx9sQqO97OuihOwUEyB7c4/GI=")
    }

    @Test func rfc5849Section3_4_1_1BaseString() throws {
        let body = try #require(FormEncoding.decode("c2&a3=2+q"))
        let oauth: [(String, String)] = [
            ("oauth_consumer_key", "9djdj82h48djs9d2"), ("oauth_token", "kkk9d7dh3k39sjv7"),
            ("oauth_signature_method", "HMAC-SHA1"), ("oauth_timestamp", "137131201"), ("oauth_nonce", "7d8f3e4a"),
            ("oauth_signature", "djosJKDKJSD8743243%2Fjdk33klY%3D"),
        ]
        let base = OAuth1.signatureBaseString(
            method: "POST", url: "http://example.com/request?b5=%3D%253D&a3=a&c%40=&a2=r%20b", parameters: oauth + body)
        #expect(
            base
                == "POST&http%3A%2F%2Fexample.com%2Frequest&a2%3Dr%2520b%26a3%3D2%2520q%26a3%3Da%26b5%3D%253D%25253D%26c%2540%3D%26c2%3D%26oauth_consumer_key%3D9djdj82h48djs9d2%26oauth_nonce%3D7d8f3e4a%26oauth_signature_method%3DHMAC-SHA1%26oauth_timestamp%3D137131201%26oauth_token%3Dkkk9d7dh3k39sjv7"
        )
    }

    @Test func xDocumentedExample() throws {
        let signed = try #require(
            OAuth1.sign(
                method: "POST", url: "https://api.x.com/1.1/statuses/update.json",
                body: [("include_entities", "true"), ("status", "Hello Ladies + Gentlemen, a signed OAuth request!")],
                consumerKey: "xvz1evFS4wEEPTGEFPHBog",
                consumerSecret: Secret("kAcSOqF21Fu85e7zjz7ZN2U4ZRhfV3WpwPAoE3Z7kBw"),
                token: "370773112-GmHxMAgYyLbNEtIKZeRNFsMKPR9EyMZeS9weJAEb",
                tokenSecret: Secret("LswwdoUaIvS8ltyTt5jkRh4J50vUPVVHtR2YPi5kE"),
                nonce: "kYjzVBB8Y0ZFabxSWbWovY3uYSQ2pTgmZeNu2VS4cg", timestamp: 1_318_622_958))
        #expect(signed.first { $0.0 == "oauth_signature" }?.1 == "Ls93hJiZbQ3akF3HF3x1Bz8/zU4=")
        let header = OAuth1.authorizationHeader(signed)
        #expect(header.contains("oauth_signature=\"Ls93hJiZbQ3akF3HF3x1Bz8%2FzU4%3D\""))
        let parsed = try #require(OAuth1.parseAuthorization(header))
        #expect(
            parsed.count == signed.count
                && parsed.first { $0.0 == "oauth_signature" }?.1 == "Ls93hJiZbQ3akF3HF3x1Bz8/zU4=")
    }

    @Test func percentEncoding() {
        #expect(OAuth1.percentEncode("Dogs, Cats & Mice") == "Dogs%2C%20Cats%20%26%20Mice")
        #expect(OAuth1.percentEncode("☃") == "%E2%98%83")
        #expect(OAuth1.percentEncode("a-._~Z9") == "a-._~Z9")
        #expect(OAuth1.baseStringURI("HTTP://Example.COM:80/r%20v/X?id=123") == "http://example.com/r%20v/X")
        #expect(OAuth1.baseStringURI("https://www.example.net:8080/?q=1") == "https://www.example.net:8080/")
    }
}

@Suite("Twitter OAuth 1.0a module: the callback must belong to this sign-in")
struct TwitterOAuth1CallbackTests {
    let provider: TwitterOAuth1Provider
    let pending = PendingSignIn(state: "s", nonce: "n", codeVerifier: "v", callbackURL: "http://127.0.0.1:1/cb")

    init() throws {
        provider = try TwitterOAuth1Provider(
            ProviderSection(id: Twitter.id, values: ["consumer_key": "k", "consumer_secret": "s"]),
            http: { ScriptedTransport() }, clock: ManualClock(start: 1_795_400_000))
    }

    @Test func anotherRequestTokenIsRefusedBeforeAnyRequest() async {
        let carry = ["token": "issued-token", "secret": "sec"]
        await #expect(
            throws: ProviderError.invalidResponse("oauth_token is not the request token issued for this sign-in")
        ) {
            try await provider.complete(
                callback: ["oauth_token": "someone-elses", "oauth_verifier": "v"], pending: pending, carry: carry)
        }
        await #expect(throws: ProviderError.self) {
            try await provider.complete(callback: ["oauth_token": "issued-token"], pending: pending, carry: carry)
        }
        await #expect(
            throws: ProviderError.invalidResponse("the request token of this sign-in is missing (cookies blocked?)")
        ) {
            try await provider.complete(
                callback: ["oauth_token": "issued-token", "oauth_verifier": "v"], pending: pending, carry: [:])
        }
        await #expect(
            throws: ProviderError.denied(code: "access_denied", description: "the authorization was refused at X")
        ) {
            try await provider.complete(callback: ["denied": "issued-token"], pending: pending, carry: carry)
        }
    }

    @Test func configurationNeedsTheConsumerCredentials() {
        #expect(throws: ProviderError.self) {
            try TwitterOAuth1Provider(
                ProviderSection(id: Twitter.id, values: ["consumer_key": "k"]), http: { ScriptedTransport() },
                clock: ManualClock(start: 0))
        }
    }

    @Test("a failed random generator fails the request instead of sending an empty nonce")
    func nonceFailureFailsTheRequest() async throws {
        struct NoRandom: Error {}
        let transport = ScriptedTransport()
        let provider = try TwitterOAuth1Provider(
            ProviderSection(id: Twitter.id, values: ["consumer_key": "k", "consumer_secret": "s"]),
            http: { transport }, clock: ManualClock(), nonce: { throw NoRandom() })
        await #expect {
            try await provider.start(for: pending)
        } throws: { error in
            guard case .unavailable(let reason) = error as? ProviderError else { return false }
            return reason.contains("nonce")
        }
        #expect(transport.sent.isEmpty, "nothing was sent")
    }

    /// Found by Fuzz/oauth1's property: `Character.isNumber` took Arabic-Indic and other non-ASCII digits as an
    /// X user id.
    @Test(arguments: ["٣٤٥", "12½", "Ⅻ", "1\u{301}", "", "1e5", " 12", String(repeating: "1", count: 33)])
    func anXUserIDIsOnlyASCIIDigits(id: String) {
        #expect(throws: ProviderError.self) {
            try TwitterOAuth1Provider.identity(["id_str": .string(id)], access: [:])
        }
    }

    @Test func anXIdentityIsTheAccessTokensUser() throws {
        let identity = try TwitterOAuth1Provider.identity(
            ["id_str": "7588892", "name": "X"], access: ["user_id": "7588892"])
        #expect(identity.subject == "7588892")
        #expect(throws: ProviderError.self) {
            try TwitterOAuth1Provider.identity(["id_str": "7588892"], access: ["user_id": "1"])
        }
    }

    @Test func requestTokenAnswersMustConfirmTheCallbackAndCarryAToken() throws {
        let good = try #require(
            TwitterOAuth1Provider.formAnswer(
                status: 200, body: "oauth_token=t&oauth_token_secret=s&oauth_callback_confirmed=true"))
        #expect(try TwitterOAuth1Provider.requestToken(good) == ("t", "s"))
        for body in [
            "oauth_token=t&oauth_token_secret=s", "oauth_token=&oauth_token_secret=s&oauth_callback_confirmed=true",
        ] {
            let answer = try #require(TwitterOAuth1Provider.formAnswer(status: 200, body: body))
            #expect(throws: ProviderError.self) { try TwitterOAuth1Provider.requestToken(answer) }
        }
        #expect(TwitterOAuth1Provider.formAnswer(status: 401, body: "oauth_token=t") == nil)
        #expect(TwitterOAuth1Provider.formAnswer(status: 200, body: "a=%zz") == nil)
    }
}
