import BrokerConfiguration
import BrokerCore
import BrokerHTTP
import BrokerServer
import BrokerTestSupport
import BrokerTesting
import Foundation
import HTTPTypes
import Logging
import Testing

extension BrokerMetrics {
    /// The exposition as text (tests).
    func text() -> String {
        String(decoding: exposition(signingKeyCreatedAt: nil, hashQueueDepth: 0, now: 0), as: UTF8.self)
    }
}

@Suite("mail over SMTP through libcurl")
struct MailTests {
    static func mailer(_ url: String, caFile: String? = nil, attempts: Int = 1, templates: String? = nil) throws
        -> (Mailer, BrokerMetrics)
    {
        var configuration = MailConfiguration()
        configuration.url = url
        configuration.from = "Broker Tests <broker@example.com>"
        configuration.caFile = caFile
        configuration.maxAttempts = attempts
        configuration.templatesDirectory = templates
        let metrics = BrokerMetrics()
        let mailer = try Mailer(
            configuration: configuration, password: nil, issuer: { "https://id.example.com" },
            logger: Logger.test(),
            metrics: metrics, clock: ManualClock(), backoff: { _ in .zero })
        return (mailer, metrics)
    }

    @Test func aResetMessageReadsBackThroughPythonsEmailPackage() async throws {
        let sink = try await SMTPSink.start()
        let (mailer, _) = try Self.mailer(sink.url)
        let link = "https://id.example.com/auth/password/reset?token=abc&next=<x>"
        let mail = mailer.compose(.reset, to: "ada@example.com", name: "Ada <Lovelace>", link: link, minutes: 30)
        #expect(await mailer.deliver(mail))
        let message = try #require(try sink.messages().first)
        #expect(message["mail_from"]?.stringValue == "broker@example.com")
        #expect(message["rcpt_tos"] == ["ada@example.com"])
        #expect(message["from"]?.stringValue == "Broker Tests <broker@example.com>")
        #expect(message["to"]?.stringValue == "ada@example.com")
        #expect(message["subject"]?.stringValue == "Reset your password")
        #expect(message["content_type"]?.stringValue == "multipart/alternative")
        #expect(message["message_id"]?.stringValue?.hasSuffix("@example.com>") == true)
        #expect(message["date"]?.stringValue?.hasSuffix("+0000") == true)
        let text = try #require(message["text"]?.stringValue)
        #expect(text.contains(link), "the text part carries the link as it is")
        #expect(text.contains("within 30 minutes"))
        #expect(text.contains("Hello, Ada <Lovelace>,"))
        let html = try #require(message["html"]?.stringValue)
        #expect(html.contains("token=abc&amp;next=&lt;x&gt;"), "every value is escaped in the HTML part")
        #expect(html.contains("Ada &lt;Lovelace&gt;"))
        #expect(!html.contains("<Lovelace>"))
        #expect(message["tls"] == false)
    }

    @Test func templatesFromAFolderReplaceTheBuiltInOnesAndNonASCIISubjectsAreEncoded() async throws {
        let sink = try await SMTPSink.start()
        let folder = try TemporaryDirectory.make(prefix: "broker-templates").path
        try Data("Subject: Réinitialisez votre mot de passe\nBonjour{{name_prefix}} : {{link}}\n".utf8)
            .write(to: URL(fileURLWithPath: folder + "/reset.txt"))
        let (mailer, _) = try Self.mailer(sink.url, templates: folder)
        #expect(
            await mailer.deliver(
                mailer.compose(.reset, to: "z@example.com", name: "Zoë", link: "L{{link}}", minutes: 30)))
        let message = try #require(try sink.messages().first)
        #expect(message["subject"]?.stringValue == "Réinitialisez votre mot de passe")
        #expect(message["text"]?.stringValue == "Bonjour, Zoë : L{{link}}\n", "a value is never expanded again")
        #expect(message["html"]?.stringValue?.contains("Choose a new password") == true, "reset.html stays built in")
        // A folder made before the recovery mail existed: that message comes from the built-in pair.
        let recovery = mailer.compose(.recover, to: "z@example.com", name: nil, link: "https://b/l", minutes: 30)
        #expect(recovery.subject == "Add a new passkey to your account" && recovery.text.contains("https://b/l"))

        try Data("no subject line {{link}}".utf8).write(to: URL(fileURLWithPath: folder + "/reset.txt"))
        #expect(throws: ConfigurationError.self) { _ = try Self.mailer(sink.url, templates: folder) }
        try Data("Subject: x\nno link at all".utf8).write(to: URL(fileURLWithPath: folder + "/reset.txt"))
        #expect(throws: ConfigurationError.self) { _ = try Self.mailer(sink.url, templates: folder) }
    }

    /// STARTTLS against a certificate the test made: trusted explicitly it works (and the sink saw TLS); not
    /// trusted, nothing is sent — there is no way to turn verification off.
    @Test func startTLSWithACertificateTheTestTrusts() async throws {
        let folder = try TemporaryDirectory.make(prefix: "broker-smtp-tls").path
        try await ProcessRunner.openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", folder + "/key.pem",
            "-out", folder + "/cert.pem",
        ])
        let sink = try await SMTPSink.start(["--tls-cert", folder + "/cert.pem", "--tls-key", folder + "/key.pem"])
        let (trusting, _) = try Self.mailer(sink.url, caFile: folder + "/cert.pem")
        #expect(
            await trusting.deliver(trusting.compose(.reset, to: "tls@example.com", name: nil, link: "L", minutes: 30)))
        #expect(try sink.messages().first?["tls"] == true)

        let (doubting, metrics) = try Self.mailer(sink.url)
        #expect(
            await doubting.deliver(doubting.compose(.reset, to: "tls@example.com", name: nil, link: "L", minutes: 30))
                == false)
        #expect(try sink.messages().count == 1)
        #expect(metrics.text().contains(#"broker_mail_total{kind="reset",outcome="failed"} 1"#))
    }

    @Test func aRefusalOrAServerThatIsDownEndsInFailedAfterBoundedAttempts() async throws {
        let refusing = try await SMTPSink.start(["--reject", "550"])
        let (mailer, metrics) = try Self.mailer(refusing.url, attempts: 3)
        #expect(
            await mailer.deliver(mailer.compose(.reset, to: "r@example.com", name: nil, link: "L", minutes: 30))
                == false)
        #expect(try refusing.messages().isEmpty)
        let closed = "smtp://127.0.0.1:\(try freeLoopbackPort())"
        let (down, downMetrics) = try Self.mailer(closed, attempts: 3)
        #expect(
            await down.deliver(down.compose(.reset, to: "d@example.com", name: nil, link: "L", minutes: 30)) == false)
        for registry in [metrics, downMetrics] {
            #expect(registry.text().contains(#"broker_mail_total{kind="reset",outcome="failed"} 1"#))
        }
    }

    @Test func smtpSettingsRefuseWhatIsNotAMailServerURL() {
        for url in [
            "http://mail.example.com", "smtp://", "smtp://user:pw@mail.example.com", "smtp://:25", "mail.example.com",
        ] {
            #expect(MailSyntax.urlProblem(url) != nil, "\(url)")
        }
        for url in ["smtp://mail.example.com", "smtps://mail.example.com:465", "smtp://127.0.0.1:2525/"] {
            #expect(MailSyntax.urlProblem(url) == nil, "\(url)")
        }
        #expect(SMTPSettings(url: "smtp://127.0.0.1:25").isLoopback)
        #expect(!SMTPSettings(url: "smtp://mail.example.com").isLoopback)
        #expect(MailSyntax.address("Broker <b@example.com>") == "b@example.com")
        #expect(MailSyntax.address("b@example.com") == "b@example.com")
        for bad in ["nobody", "a@b@c", "a b@example.com", "x <a@b\r\nBcc: c@d>", "\"q\" <a@b>"] {
            #expect(MailSyntax.address(bad) == nil, "\(bad)")
        }
    }
}
