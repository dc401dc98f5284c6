import BrokerCore
import BrokerCrypto
import BrokerServer
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Testing

/// `response_mode=form_post` (OAuth 2.0 Form Post Response Mode), as the Form Post OP plan checks it: the code
/// and the errors alike come back in a page that posts them to the redirect URI — by its one allowed script,
/// or by a visible button without script — under a policy whose `form-action` is the app's origin alone.
@Suite("response_mode=form_post")
struct FormPostResponseModeTests {
    typealias Apps = OpenIDProviderTests
    typealias Reply = InProcessBroker.Client.Reply

    /// The form a form-post page posts: its action and its hidden fields.
    static func posted(_ reply: Reply) -> (action: String, fields: [String: String])? {
        let html = String(decoding: reply.body, as: UTF8.self)
        guard let start = html.range(of: "<form method=\"post\" action=\"") else { return nil }
        let action = String(html[start.upperBound...].prefix { $0 != "\"" })
        var fields: [String: String] = [:]
        for part in html.components(separatedBy: "<input type=\"hidden\" name=\"").dropFirst() {
            let name = String(part.prefix { $0 != "\"" })
            guard let value = part.range(of: "value=\"") else { continue }
            fields[name] = String(part[value.upperBound...].prefix { $0 != "\"" })
                .replacingOccurrences(of: "&amp;", with: "&").replacingOccurrences(of: "&quot;", with: "\"")
        }
        return (action.replacingOccurrences(of: "&amp;", with: "&"), fields)
    }

    static func policy(_ reply: Reply) -> String { reply.headers[.contentSecurityPolicy] ?? "" }

    @Test func theCodeAndTheErrorsArePostedToTheApp() async throws {
        let broker = try await InProcessBroker(config: InProcessBrowserFlowTests.config)
        try await Apps.register(broker, firstParty: true)
        try await broker.test { client in
            _ = try await client.register("fp@example.com", Apps.password)
            let jar = Apps.Jar()
            let page = try await Apps.get(
                client, Apps.authorizeURI(Apps.webRequest(extra: [("response_mode", "form_post")])), jar)
            #expect(page.status == 200)
            let signedIn = try await Apps.passwordSignIn(client, page: page, jar, email: "fp@example.com")
            #expect(signedIn.status == 200 && signedIn.header("Location") == nil, "a page, not a redirect")
            let answer = try #require(Self.posted(signedIn), "\(String(decoding: signedIn.body, as: UTF8.self))")
            #expect(answer.action == Apps.web)
            #expect(answer.fields["state"] == "st-1" && answer.fields["iss"] == "http://broker.test")
            let code = try #require(answer.fields["code"])
            #expect(!String(decoding: signedIn.body, as: UTF8.self).contains("url="), "no code in any URL")
            // The policy: this one script by its hash, a form to the app's origin, nothing else.
            let policy = Self.policy(signedIn)
            let hash = Base64URL.encodeStandard(Digest.sha256("document.forms[0].submit();"))
            #expect(policy.contains("script-src 'sha256-\(hash)'"), "\(policy)")
            #expect(policy.contains("form-action https://app.example;"), "\(policy)")
            #expect(policy.contains("default-src 'none'") && policy.contains("frame-ancestors 'none'"))
            let html = String(decoding: signedIn.body, as: UTF8.self)
            #expect(html.contains("<script>document.forms[0].submit();</script>"))
            #expect(
                html.contains("<noscript><button type=\"submit\">Continue</button></noscript>"), "works without script")
            let tokens = try await Apps.redeem(client, code: code)
            #expect(tokens.status == 200 && tokens["id_token"] != nil)

            // An error goes back the same way: prompt=none with no browser session.
            let fresh = Apps.Jar()
            let none = try await Apps.get(
                client,
                Apps.authorizeURI(Apps.webRequest(extra: [("response_mode", "form_post"), ("prompt", "none")])), fresh)
            let error = try #require(Self.posted(none), "\(String(decoding: none.body, as: UTF8.self))")
            #expect(error.action == Apps.web && error.fields["error"] == "login_required")
            #expect(error.fields["state"] == "st-1" && error.fields["code"] == nil)
            #expect(none.header("Location") == nil)
            // A refused request too, once its client and redirect URI are known to be good.
            let badScope = try await Apps.get(
                client,
                Apps.authorizeURI(Apps.webRequest(extra: [("response_mode", "form_post"), ("prompt", "sideways")])),
                fresh)
            #expect(Self.posted(badScope)?.fields["error"] == "invalid_request")
        }
    }

    @Test func otherModesAndTheCLIAreRefused() async throws {
        let broker = try await InProcessBroker(config: InProcessBrowserFlowTests.config)
        try await Apps.register(broker)
        try await broker.test { client in
            for mode in ["fragment", "query.jwt", "form_post.jwt", ""] {
                let reply = try await client.get(
                    Apps.authorizeURI(Apps.webRequest(extra: [("response_mode", mode)])))
                let location = try #require(reply.header("Location"), "\(mode)")
                #expect(Flow.query(location)["error"] == "invalid_request", "\(mode): \(location)")
            }
            // The CLI listens for a GET: form_post is not for it.
            let cli = try await client.get(
                "/auth/authorize?"
                    + FormEncoding.encode([
                        ("response_type", "code"), ("client_id", "broker-cli"),
                        ("redirect_uri", "http://127.0.0.1:9/callback"), ("scope", "openid"), ("state", "s"),
                        ("code_challenge", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"),
                        ("code_challenge_method", "S256"), ("response_mode", "form_post"),
                    ]))
            #expect(Flow.query(cli.header("Location") ?? "")["error"] == "invalid_request")
            let discovery = try await client.get("/.well-known/openid-configuration")
            #expect(discovery["response_modes_supported"] == ["query", "form_post"])
        }
    }

    typealias Flow = InProcessBrowserFlowTests

    @Test func originsForAPolicy() {
        #expect(AppRules.origin("https://app.example/callback?x=1") == "https://app.example")
        #expect(AppRules.origin("http://127.0.0.1:8080/cb") == "http://127.0.0.1:8080")
        #expect(AppRules.origin("https://[::1]:8443/cb") == "https://[::1]:8443")
        for bad in ["com.example.app:/cb", "https://user@app.example/cb", "https://app.example;x/cb", "https:///cb"] {
            #expect(AppRules.origin(bad) == nil, "\(bad)")
        }
    }
}
