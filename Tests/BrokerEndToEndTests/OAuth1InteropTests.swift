import BrokerCore
import BrokerTestSupport
import BrokerTesting
import Testing
import Twitter

/// Our RFC 5849 signatures against oauthlib's for requests with awkward parameters: repeated names, empty
/// values, reserved and non-ASCII characters, `+` and spaces, query and body together, callback, verifier.
@Suite("OAuth 1.0a: our signatures equal oauthlib's")
struct OAuth1InteropTests {
    struct Case {
        let method: String
        let url: String
        let body: [(String, String)]
        let token: String?
        let tokenSecret: String?
        let extra: [(String, String)]
    }

    @Test func signaturesMatch() async throws {
        let cases = [
            Case(
                method: "POST", url: "http://127.0.0.1:8788/twitter/oauth/request_token", body: [], token: nil,
                tokenSecret: nil,
                extra: [("oauth_callback", "http://127.0.0.1:8787/auth/twitter/callback?state=a%2Bb/c~d")]),
            Case(
                method: "POST", url: "https://api.x.com/oauth/access_token", body: [], token: "req-token",
                tokenSecret: "req secret & more", extra: [("oauth_verifier", "v3r1f!er")]),
            Case(
                method: "GET", url: "https://api.x.com/1.1/search.json?q=caf%C3%A9+%E2%98%83&count=5&count=10&empty=",
                body: [], token: "t", tokenSecret: "s", extra: []),
            Case(
                method: "POST", url: "https://EXAMPLE.com:443/a%20path/x?b=2&a=1",
                body: [("status", "Hello + world, 100% ☃"), ("a", "z"), ("a", "")], token: "t", tokenSecret: "",
                extra: []),
        ]
        for item in cases {
            let consumerSecret = "c0nsumer/secret+&="
            let signed = try #require(
                OAuth1.sign(
                    method: item.method, url: item.url, body: item.body, consumerKey: "key with space",
                    consumerSecret: Secret(consumerSecret), token: item.token,
                    tokenSecret: item.tokenSecret.map(Secret.init), extra: item.extra, nonce: "n0nce",
                    timestamp: 1_795_400_000))
            var json: [String: JSONValue] = [
                "method": .string(item.method), "url": .string(item.url),
                "body": .array(item.body.map { .array([.string($0.0), .string($0.1)]) }),
                "consumer_key": "key with space", "consumer_secret": .string(consumerSecret), "nonce": "n0nce",
                "timestamp": 1_795_400_000,
            ]
            if let token = item.token { json["token"] = .string(token) }
            if let secret = item.tokenSecret { json["token_secret"] = .string(secret) }
            for (name, value) in item.extra {
                json[name == "oauth_callback" ? "callback" : "verifier"] = .string(value)
            }
            let theirs = try await Interop.run(["oauth1_sign.py", JSONValue.object(json).serialized()])
            #expect(theirs.status == 0, "\(theirs.stderr)")
            let expected = JSONValue.parse(Array(theirs.stdout.utf8))?["signature"]?.stringValue
            #expect(signed.first { $0.0 == "oauth_signature" }?.1 == expected, "\(item.method) \(item.url)")
        }
    }
}
