package import BrokerConfiguration
package import BrokerCore
import BrokerCrypto
import BrokerHTTP
import BrokerSystem
package import Logging
import Synchronization

/// Which message: the template pair it is made from.
package enum MailKind: String, Sendable {
    case reset
    case verify
    /// To the owner of an address someone tried to register again (`server.enumeration_protection`), with a
    /// reset link.
    case exists
    /// To the verified address of an account whose only ways in are passkeys, with a link that adds a new one.
    case recover
    /// To the confirmed address of an account whose second factor changed (added, removed, new recovery codes,
    /// a recovery code used), with a link to choose a new password; `{{change}}` says what happened.
    case secondFactor = "mfa"
    /// To the confirmed address of an account whose authenticator and recovery codes are lost, with a link that
    /// removes the second factor after asking for the password.
    case secondFactorRecovery = "mfa-recover"
}

/// The templates a message is made from: `<kind>.txt` (its first line `Subject: …`) and `<kind>.html`, built in
/// (Sources/BrokerServer/Mail/Templates, linked as Config/mail) or from `mail.templates_dir`. Placeholders:
/// `{{link}}`, `{{issuer}}`, `{{email}}`, `{{name_prefix}}` (", Name" or nothing), `{{minutes}}`, `{{hours}}`, and `{{change}}` in `mfa`;
/// in the HTML every value is escaped.
struct MailTemplates: Sendable {
    struct Pair: Sendable {
        let subject: String
        let text: String
        let html: String
    }

    let pairs: [MailKind: Pair]

    /// The built-in templates, each replaced by the file of the same name in `directory` when it has one.
    static func load(directory: String?) throws(ConfigurationError) -> MailTemplates {
        func file(_ name: String, builtIn: [UInt8]) throws(ConfigurationError) -> String {
            guard let directory else { return String(decoding: builtIn, as: UTF8.self) }
            let path = PosixFile.expandingTilde(directory) + "/" + name
            guard PosixFile.exists(path) else { return String(decoding: builtIn, as: UTF8.self) }
            do {
                return String(decoding: try PosixFile.read(path: path, maxSize: 256 * 1024), as: UTF8.self)
            } catch {
                throw ConfigurationError(source: path, key: nil, problem: "cannot read: \(error.reason)")
            }
        }
        var pairs: [MailKind: Pair] = [:]
        for (kind, text, html) in [
            (MailKind.reset, PackageResources.reset_txt, PackageResources.reset_html),
            (.verify, PackageResources.verify_txt, PackageResources.verify_html),
            (.exists, PackageResources.exists_txt, PackageResources.exists_html),
            (.recover, PackageResources.recover_txt, PackageResources.recover_html),
            (.secondFactor, PackageResources.mfa_txt, PackageResources.mfa_html),
            (.secondFactorRecovery, PackageResources.mfa_recover_txt, PackageResources.mfa_recover_html),
        ] {
            let textTemplate = try file("\(kind.rawValue).txt", builtIn: text)
            let lines = textTemplate.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
            guard lines.count == 2, lines[0].hasPrefix("Subject: "), lines[0].count > 9 else {
                throw ConfigurationError(
                    source: "\(directory ?? "built-in")/\(kind.rawValue).txt", key: nil,
                    problem: "the first line must be \"Subject: …\"")
            }
            let htmlTemplate = try file("\(kind.rawValue).html", builtIn: html)
            for (name, body) in [("txt", textTemplate), ("html", htmlTemplate)] where !body.contains("{{link}}") {
                throw ConfigurationError(
                    source: "\(directory ?? "built-in")/\(kind.rawValue).\(name)", key: nil,
                    problem: "has no {{link}}: the message would be useless")
            }
            pairs[kind] = Pair(
                subject: String(lines[0].dropFirst(9).filter { $0 != "\r" }), text: String(lines[1]), html: htmlTemplate
            )
        }
        return MailTemplates(pairs: pairs)
    }

    /// `template` with every `{{name}}` replaced; `escape` applies to the values (HTML).
    static func fill(_ template: String, _ values: [String: String], escape: (String) -> String = { $0 }) -> String {
        var result = ""
        var rest = Substring(template)
        while let open = rest.firstRange(of: "{{") {
            result += rest[..<open.lowerBound]
            guard let close = rest[open.upperBound...].firstRange(of: "}}") else {
                rest = rest[open.lowerBound...]
                break
            }
            let name = String(rest[open.upperBound..<close.lowerBound])
            if let value = values[name] {
                result += escape(value)
            } else {
                result += rest[open.lowerBound..<close.upperBound]
            }
            rest = rest[close.upperBound...]
        }
        return result + rest
    }
}

/// One message for one person.
package struct OutgoingMail: Sendable {
    let kind: MailKind
    let to: String
    package let subject: String
    package let text: String
    package let html: String
}

/// Sends the broker's mail: composes it from the templates, hands it to the SMTP server through libcurl, and
/// retries a bounded number of times. Requests never wait for mail: they enqueue and answer, so an unknown
/// address and a known one take the same time, and a mail server that is down costs nothing but a log line.
/// The links in messages are secrets: they are never logged.
package final class Mailer: Sendable {
    let client: SMTPClient
    let from: String
    let fromAddress: String
    let templates: MailTemplates
    /// Read when a message is written: with `--port 0` the issuer is known only once the port is bound.
    let issuer: @Sendable () -> String
    let maxAttempts: Int
    /// How long to wait before attempt `n + 1` (injected: tests retry at once).
    let backoff: @Sendable (Int) -> Duration
    let logger: Logger
    let metrics: BrokerMetrics
    let clock: any WallClock
    private let pending = PendingMail()

    package init(
        configuration: MailConfiguration, password: Secret?, issuer: @escaping @Sendable () -> String, logger: Logger,
        metrics: BrokerMetrics,
        clock: any WallClock, backoff: @escaping @Sendable (Int) -> Duration = { .seconds(5 << min($0, 6)) }
    ) throws(ConfigurationError) {
        guard let address = MailSyntax.address(configuration.from) else {
            throw ConfigurationError(source: "configuration", key: "mail.from", problem: "not an address")
        }
        client = SMTPClient(
            settings: SMTPSettings(
                url: configuration.url, username: configuration.username, password: password,
                caFile: configuration.caFile.map(PosixFile.expandingTilde)))
        from = configuration.from
        fromAddress = address
        templates = try MailTemplates.load(directory: configuration.templatesDirectory)
        self.issuer = issuer
        maxAttempts = configuration.maxAttempts
        self.backoff = backoff
        self.logger = logger
        self.metrics = metrics
        self.clock = clock
    }

    /// The message of `kind` for `email`, with `link` and the other values filled in. `name` is shown only when
    /// it can be trusted: see ``shownName(_:verified:)``.
    package func compose(
        _ kind: MailKind, to email: String, name: String?, link: String, minutes: Int64,
        values more: [String: String] = [:]
    ) -> OutgoingMail {
        let pair =
            templates.pairs[kind] ?? MailTemplates.Pair(subject: kind.rawValue, text: "{{link}}", html: "{{link}}")
        let values = [
            "link": link, "issuer": issuer(), "email": email, "name_prefix": name.map { ", " + $0 } ?? "",
            "minutes": "\(minutes)", "hours": "\(minutes / 60)",
        ].merging(more) { own, _ in own }
        return OutgoingMail(
            kind: kind, to: email, subject: MailTemplates.fill(pair.subject, values),
            text: MailTemplates.fill(pair.text, values),
            html: MailTemplates.fill(pair.html, values, escape: HTML.escape))
    }

    /// Runs `prepare` in the background and sends the message it returns, if any (with retries); the caller
    /// does not wait. ``flush()`` waits for both. The work runs in a child `Task`, which inherits the caller's
    /// task-local values: the request's ``RequestOrigin`` reaches the audit events `prepare` records.
    /// The name to greet someone by: none unless the address has been confirmed. Until then whoever registered
    /// chose both the name and the address, so a name in the mail would be their words in broker's message
    /// to someone else (attack review RT2-8: "Hello, your bank account is locked, call …").
    static func shownName(_ name: String?, verified: Bool) -> String? { verified ? name : nil }

    func enqueue(_ kind: MailKind, _ prepare: @escaping @Sendable () async -> OutgoingMail?) {
        let started = pending.run {
            guard let mail = await prepare() else { return }
            _ = await self.deliver(mail)
        }
        if !started {
            metrics.mail(kind: kind.rawValue, outcome: "dropped")
            logger.error(
                "mail not sent: too many messages waiting for the mail server",
                metadata: ["broker.mail": "\(kind.rawValue)"])
        }
    }

    /// Waits for every message enqueued so far (tests; a broker stopping).
    package func flush() async { await pending.waitAll() }

    /// Tries up to `maxAttempts` times; a permanent refusal (5xx) ends it at once. Returns whether it was sent.
    @discardableResult
    package func deliver(_ mail: OutgoingMail) async -> Bool {
        let domain = fromAddress.split(separator: "@").last.map(String.init) ?? "broker"
        let message = MIMEMessage.compose(mail, from: from, domain: domain, now: clock.seconds())
        for attempt in 1...maxAttempts {
            do {
                try await client.send(message, from: fromAddress, to: [mail.to])
                metrics.mail(kind: mail.kind.rawValue, outcome: "sent")
                logger.info("mail sent", metadata: ["broker.mail": "\(mail.kind.rawValue)", "attempt": "\(attempt)"])
                return true
            } catch {
                let last = attempt == maxAttempts || error.isPermanent
                logger.warning(
                    last ? "mail not sent, giving up" : "mail not sent, will retry",
                    metadata: [
                        "broker.mail": "\(mail.kind.rawValue)", "attempt": "\(attempt)", "error": "\(error)",
                    ])
                if last { break }
                try? await Task.sleep(for: backoff(attempt))
            }
        }
        metrics.mail(kind: mail.kind.rawValue, outcome: "failed")
        return false
    }
}

/// The messages being delivered, so that they can be waited for; each forgets itself when done. Bounded: a
/// mail server that is down while requests keep coming must not grow the broker without limit.
private final class PendingMail: Sendable {
    private struct State {
        var next = 0
        var tasks: [Int: Task<Void, Never>] = [:]
    }
    private let state = Mutex(State())
    static let limit = 1000

    /// Starts `body` unless ``limit`` deliveries are under way; returns whether it started.
    func run(_ body: @escaping @Sendable () async -> Void) -> Bool {
        state.withLock { state in
            guard state.tasks.count < Self.limit else { return false }
            let id = state.next
            state.next += 1
            // Created under the lock: the task's own removal waits until it is recorded.
            state.tasks[id] = Task {
                await body()
                self.state.withLock { _ = $0.tasks.removeValue(forKey: id) }
            }
            return true
        }
    }

    func waitAll() async {
        while true {
            let running = state.withLock { Array($0.tasks.values) }
            if running.isEmpty { return }
            for task in running { await task.value }
        }
    }
}

/// RFC 5322 + MIME: `multipart/alternative` with the text and the HTML, each base64 in 76-column lines (any
/// byte safe, no line SMTP could mangle).
enum MIMEMessage {
    static func compose(_ mail: OutgoingMail, from: String, domain: String, now: Int64) -> [UInt8] {
        let boundary = "broker-" + ((try? SecureRandom.token(byteCount: 12)) ?? "\(now)")
        let messageID = ((try? SecureRandom.token(byteCount: 16)) ?? "\(now)") + "@" + domain
        var lines = [
            "Date: " + rfc5322Date(now),
            "From: " + header(from),
            "To: " + mail.to,
            "Subject: " + header(mail.subject),
            "Message-ID: <\(messageID)>",
            "MIME-Version: 1.0",
            "Auto-Submitted: auto-generated",
            "Content-Type: multipart/alternative; boundary=\"\(boundary)\"",
            "",
        ]
        for (type, body) in [("text/plain", mail.text), ("text/html", mail.html)] {
            lines += ["--" + boundary, "Content-Type: \(type); charset=utf-8", "Content-Transfer-Encoding: base64", ""]
            let encoded = Base64URL.encodeStandard(Array(body.utf8))
            var index = encoded.startIndex
            while index < encoded.endIndex {
                let end = encoded.index(index, offsetBy: 76, limitedBy: encoded.endIndex) ?? encoded.endIndex
                lines.append(String(encoded[index..<end]))
                index = end
            }
        }
        lines += ["--" + boundary + "--", ""]
        return Array(lines.joined(separator: "\r\n").utf8)
    }

    /// A header value: as it is when it is plain ASCII without line breaks, else an RFC 2047 encoded word.
    static func header(_ value: String) -> String {
        let clean = value.filter { $0 != "\r" && $0 != "\n" }
        if clean.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) { return clean }
        return "=?UTF-8?B?" + Base64URL.encodeStandard(Array(clean.utf8)) + "?="
    }

    /// `Tue, 24 Nov 2026 09:40:47 +0000`.
    static func rfc5322Date(_ seconds: Int64) -> String {
        let stamp = RFC3339.format(epochSeconds: seconds)  // 2026-11-24T09:40:47Z
        let parts = stamp.split(whereSeparator: { $0 == "-" || $0 == "T" || $0 == "Z" })
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let weekdays = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        let weekday = weekdays[Int(((days % 7) + 7) % 7)]
        guard parts.count >= 4, let month = Int(parts[1]), (1...12).contains(month) else { return stamp }
        return "\(weekday), \(parts[2]) \(months[month - 1]) \(parts[0]) \(parts[3]) +0000"
    }
}
