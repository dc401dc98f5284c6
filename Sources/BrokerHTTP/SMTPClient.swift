package import BrokerCore
import BrokerSystem
internal import CCurl
import Glibc
import Synchronization

/// Where and how mail is handed over: an SMTP server reached through libcurl.
///
/// TLS is never optional towards another machine: `smtps://` is TLS from the first byte, and `smtp://` must
/// upgrade with STARTTLS (libcurl's `CURLUSESSL_ALL`: no STARTTLS, no mail). Only a server on this machine may
/// be spoken to in plain text (it still upgrades when it offers STARTTLS). Certificates are always verified,
/// against the system's trust store or, when `caFile` names one, against that bundle instead (a private CA).
package struct SMTPSettings: Sendable, Equatable {
    package var url: String
    package var username: String?
    package var password: Secret?
    package var caFile: String?
    package var timeout: Duration = .seconds(30)

    package init(url: String, username: String? = nil, password: Secret? = nil, caFile: String? = nil) {
        self.url = url
        self.username = username
        self.password = password
        self.caFile = caFile
    }

    /// Why `url` cannot be used, or `nil` (``MailSyntax/urlProblem(_:)``).
    package static func problem(url: String) -> String? { MailSyntax.urlProblem(url) }

    /// The host named by `url`, lowercased (brackets kept for IPv6).
    package var host: String {
        let authority = url.lowercased().drop { $0 != "/" }.dropFirst(2).prefix { $0 != "/" }
        if authority.hasPrefix("[") { return String(authority.prefix { $0 != "]" }) + "]" }
        return String(authority.prefix { $0 != ":" })
    }

    /// Whether the server is on this machine (plain text allowed).
    package var isLoopback: Bool { LoopbackHost.contains(host) }
}

/// Why a message was not accepted.
package struct SMTPError: Error, Sendable, CustomStringConvertible {
    /// The server's reply code when it refused (550 …), else 0.
    package let replyCode: Int
    package let message: String
    /// A refusal the server means for good (5xx): retrying the same message will not help.
    package var isPermanent: Bool { (500..<600).contains(replyCode) }

    package var description: String { replyCode == 0 ? message : "\(message) (SMTP \(replyCode))" }
}

/// Hands one message at a time to an SMTP server through libcurl (a fresh connection each time: mail is
/// rare, and a connection that sat idle is a connection the server may have dropped).
package struct SMTPClient: Sendable {
    package let settings: SMTPSettings

    package init(settings: SMTPSettings) { self.settings = settings }

    /// Sends `message` (a complete RFC 5322 message, CRLF line ends) from `sender` to `recipients` (bare
    /// addresses). libcurl does SMTP's dot-stuffing.
    package func send(_ message: [UInt8], from sender: String, to recipients: [String]) async throws(SMTPError) {
        let settings = self.settings
        let result: Result<Void, SMTPError> = await withCheckedContinuation { continuation in
            DetachedThread.start(stackSize: 512 * 1024) {
                continuation.resume(
                    returning: SMTPTransfer(settings: settings, message: message).perform(
                        from: sender, to: recipients))
            }
        }
        try result.get()
    }
}

/// One SMTP exchange on its own easy handle, on the thread running it.
private final class SMTPTransfer: @unchecked Sendable {
    let settings: SMTPSettings
    let message: [UInt8]
    private var offset = 0

    init(settings: SMTPSettings, message: [UInt8]) {
        self.settings = settings
        self.message = message
    }

    func perform(from sender: String, to recipients: [String]) -> Result<Void, SMTPError> {
        if let problem = SMTPSettings.problem(url: settings.url) {
            return .failure(SMTPError(replyCode: 0, message: problem))
        }
        for address in [sender] + recipients
        where address.isEmpty || address.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "<" || $0 == ">" }) {
            return .failure(SMTPError(replyCode: 0, message: "\"\(address)\" is not a mail address"))
        }
        _ = HTTPClient.shared  // curl_global_init, once, before any handle
        guard let handle = curl_easy_init() else {
            return .failure(SMTPError(replyCode: 0, message: "curl_easy_init failed"))
        }
        defer { curl_easy_cleanup(handle) }
        var rcpt: UnsafeMutablePointer<curl_slist>?
        for address in recipients { rcpt = curl_slist_append(rcpt, "<\(address)>") }
        defer { curl_slist_free_all(rcpt) }
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        let me = Unmanaged.passUnretained(self).toOpaque()
        let code: CURLcode = errorBuffer.withUnsafeMutableBufferPointer { errorPointer in
            var options = CurlOptions(handle)
            options.base(
                url: settings.url, protocols: "smtp,smtps", errorBuffer: errorPointer.baseAddress,
                connectTimeout: min(settings.timeout, .seconds(10)), timeout: settings.timeout)
            if let caFile = settings.caFile { options.set(broker_curl_setopt_string(handle, CURLOPT_CAINFO, caFile)) }
            let implicitTLS = settings.url.lowercased().hasPrefix("smtps://")
            if !implicitTLS {
                let level = settings.isLoopback ? CURLUSESSL_TRY : CURLUSESSL_ALL
                options.set(broker_curl_setopt_long(handle, CURLOPT_USE_SSL, Int(level.rawValue)))
            }
            if let username = settings.username {
                options.set(broker_curl_setopt_string(handle, CURLOPT_USERNAME, username))
            }
            if let password = settings.password {
                options.set(broker_curl_setopt_string(handle, CURLOPT_PASSWORD, password.exposed))
            }
            options.set(broker_curl_setopt_string(handle, CURLOPT_MAIL_FROM, "<\(sender)>"))
            options.set(broker_curl_setopt_slist(handle, CURLOPT_MAIL_RCPT, rcpt))
            options.set(broker_curl_setopt_long(handle, CURLOPT_UPLOAD, 1))
            options.set(broker_curl_setopt_off(handle, CURLOPT_INFILESIZE_LARGE, curl_off_t(message.count)))
            options.set(
                broker_curl_setopt_data_cb(
                    handle, CURLOPT_READFUNCTION,
                    { buffer, size, count, user in
                        guard let user, let buffer else { return 0 }
                        return Unmanaged<SMTPTransfer>.fromOpaque(user).takeUnretainedValue().read(
                            into: buffer, size * count)
                    }))
            options.set(broker_curl_setopt_pointer(handle, CURLOPT_READDATA, me))
            if options.failure != CURLE_OK { return options.failure }
            return curl_easy_perform(handle)
        }
        guard code == CURLE_OK else {
            var reply = 0
            _ = broker_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &reply)
            return .failure(
                SMTPError(
                    replyCode: reply >= 400 ? reply : 0, message: CurlOptions.message(code, errorBuffer: errorBuffer)))
        }
        return .success(())
    }

    private func read(into buffer: UnsafeMutablePointer<CChar>, _ capacity: Int) -> Int {
        let count = min(capacity, message.count - offset)
        guard count > 0 else { return 0 }
        message.withUnsafeBytes { bytes in
            guard let base = bytes.baseAddress else { return }
            UnsafeMutableRawPointer(buffer).copyMemory(from: base + offset, byteCount: count)
        }
        offset += count
        return count
    }
}
