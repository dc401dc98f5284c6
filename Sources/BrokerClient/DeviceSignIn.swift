package import BrokerCore
import BrokerQR

/// `broker login --device` (RFC 8628 from the device's side): ask the broker for a code, show it (and, on a
/// terminal, a QR code of the complete URL), poll at the given interval — five seconds more after each
/// `slow_down` — until the person allows or denies on another device, or the code expires.
package struct DeviceSignIn: Sendable {
    /// Why the device sign-in ended without a session.
    package enum Failure: Error, Sendable, CustomStringConvertible {
        case denied
        case expired
        case broker(BrokerAPIError)
        case session(SessionError)

        package var description: String {
            switch self {
            case .denied: "the sign-in was denied on the other device"
            case .expired: "the code expired before anyone approved it; run broker login --device again"
            case .broker(let error): "device sign-in failed: \(error)"
            case .session(let error): error.description
            }
        }
    }

    package let settings: ClientSettings
    package let api: BrokerAPI
    package let provider: ProviderID?
    /// Draw the QR code (a person is looking at a terminal).
    package let showQR: Bool
    package let presenter: any SignInPresenter
    /// Waits between polls; injected so that tests need not wait (the CLI sleeps).
    package let pause: @Sendable (Int64) async throws -> Void
    /// `broker link --device`: the signed-in session's access token; the account signed in with on the other
    /// device is then attached to its user.
    package let linkingAs: Secret?

    package init(
        settings: ClientSettings, api: BrokerAPI, provider: ProviderID?, showQR: Bool,
        presenter: any SignInPresenter, linkingAs: Secret? = nil,
        pause: @escaping @Sendable (Int64) async throws -> Void = { try await Task.sleep(for: .seconds($0)) }
    ) {
        self.linkingAs = linkingAs
        self.settings = settings
        self.api = api
        self.provider = provider
        self.showQR = showQR
        self.presenter = presenter
        self.pause = pause
    }

    package func run() async throws(Failure) -> Session {
        let start: DeviceStart
        do {
            start = try await api.deviceAuthorization(provider: provider, linkingAs: linkingAs)
        } catch {
            throw .broker(error)
        }
        presenter.note(
            "To \(linkingAs == nil ? "sign in" : "link the account"), open \(start.verificationURI) on any device and "
                + "enter the code:")
        presenter.note("")
        presenter.note("    \(start.userCode)")
        presenter.note("")
        if let complete = start.verificationURIComplete {
            presenter.note("Or open \(complete) (the code is filled in)\(showQR ? ", or scan:" : ".")")
            if showQR, let lines = QRText.render(complete) {
                for line in lines { presenter.note(line) }
            }
        }
        presenter.note("Waiting for the approval (at most \(start.expiresIn / 60) min; Ctrl-C to stop)…")
        let deadline = ContinuousClock.now + .seconds(start.expiresIn)
        var interval = start.interval
        while true {
            guard ContinuousClock.now + .seconds(interval) < deadline else { throw .expired }
            do {
                try await pause(interval)
            } catch {
                throw .expired
            }
            let response: SessionResponse
            do {
                response = try await api.pollDevice(start.deviceCode)
            } catch {
                if case .rejected(_, let code, _) = error {
                    switch code {
                    case .authorizationPending: continue
                    case .slowDown:
                        interval += 5
                        continue
                    case .accessDenied: throw .denied
                    case .expiredToken: throw .expired
                    default: break
                    }
                }
                throw .broker(error)
            }
            do {
                return try SessionService(cache: settings.credentials(), api: api, key: settings.key).store(response)
            } catch {
                throw .session(error)
            }
        }
    }
}

/// A QR code as text: libqrencode encodes, each character cell draws two rows of modules with Unicode half
/// blocks, with the quiet zone the standard asks for (four modules).
package enum QRText {
    /// The lines, or `nil` when the text cannot be encoded (too long).
    package static func render(_ text: String, quietZone: Int = 4) -> [String]? {
        guard let modules = QRCode.modules(text) else { return nil }
        let size = modules.count + 2 * quietZone
        func dark(_ row: Int, _ column: Int) -> Bool {
            let (r, c) = (row - quietZone, column - quietZone)
            guard r >= 0, c >= 0, r < modules.count, c < modules.count else { return false }
            return modules[r][c]
        }
        // Light modules are drawn (the terminal's text colour is light on a dark background in most
        // terminals); `invert` would be the choice for dark-on-light terminals.
        var lines: [String] = []
        for row in stride(from: 0, to: size, by: 2) {
            var line = ""
            for column in 0..<size {
                let top = !dark(row, column)
                let bottom = row + 1 < size ? !dark(row + 1, column) : false
                line += top ? (bottom ? "█" : "▀") : (bottom ? "▄" : " ")
            }
            lines.append(line)
        }
        return lines
    }
}
