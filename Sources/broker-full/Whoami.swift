import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerProviderSchemas
import Glibc
import ProviderSupport

extension Broker {
    struct Whoami: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the signed-in user, provider, token expiry, broker and profile.",
            discussion: "Asks the broker whether the session still stands; exit 4 when signed out."
        )

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        func run() async throws {
            let settings = try client.settings()
            let api = settings.api
            let service = SessionService(cache: settings.credentials(), api: api, key: settings.key)
            var session: Session
            do {
                session = try await service.validSession(minValid: 0)
            } catch {
                if case .broker = error, let stale = (try? settings.credentials().session(for: settings.key)) ?? nil {
                    // The broker is unreachable and the token expired: still say who is cached.
                    Console.warning("could not refresh the session: \(error)")
                    session = stale
                } else {
                    throw ClientFailure.exit(error, settings: settings)
                }
            }
            var profile: JSONValue?
            do {
                var quick = api
                quick.timeout = min(quick.timeout, .seconds(5))
                profile = try await quick.me(session.accessToken)
            } catch {
                if error.isAuthenticationRefusal {
                    try? service.forget()
                    throw ClientFailure.exit(.rejected(settings.key, reason: error.description), settings: settings)
                }
                Console.warning("could not confirm the session with the broker (\(error)); showing the cached one")
            }
            // The ways in, once the broker has confirmed the session (an older broker without the endpoint: none).
            var identities: [JSONValue] = []
            if profile != nil {
                var quick = api
                quick.timeout = min(quick.timeout, .seconds(5))
                identities = (try? await quick.identities(session.accessToken))?["identities"]?.arrayValue ?? []
            }
            let now = SystemClock().seconds()
            let email = profile?["email"]?.stringValue
            let emailVerified = profile?["email_verified"]?.boolValue
            let name = profile?["name"]?.stringValue
            if json {
                var fields: [String: JSONValue] = [
                    "user_id": .string(session.userID.description),
                    "provider": .string(session.provider.rawValue),
                    "expires_at": .string(RFC3339.format(epochSeconds: session.expiresAt)),
                    "expires_in": .int(max(0, session.remaining(at: now))),
                    "broker": .string(session.key.brokerURL),
                    "profile": .string(session.key.profile),
                    "verified": .bool(profile != nil),
                    // Bound to this profile's DPoP key (a copy of the credentials file is useless without it).
                    "dpop_bound": .bool(isDPoPBound(session.accessToken)),
                    // Where the session's long-lived secrets are: "keyring" or "file".
                    "credential_store": .string(session.secretsInKeyring ? "keyring" : "file"),
                ]
                if let email { fields["email"] = .string(email) }
                if let emailVerified { fields["email_verified"] = .bool(emailVerified) }
                if let name { fields["name"] = .string(name) }
                if !identities.isEmpty { fields["identities"] = .array(identities) }
                Console.out(JSONValue.object(fields).serialized())
                return
            }
            var lines = [("user", session.userID.description)]
            if let name { lines.append(("name", name)) }
            if let email { lines.append(("email", email + (emailVerified == false ? " (not confirmed)" : ""))) }
            lines.append(("provider", session.provider.rawValue))
            if !identities.isEmpty {
                lines.append(("signs in", identities.map(Self.describe).joined(separator: ", ")))
            }
            lines += [
                ("expires", Expiry.describe(session.expiresAt, now: now)),
                ("broker", session.key.brokerURL),
                ("profile", session.key.profile),
            ]
            lines.append(
                (
                    "secrets",
                    session.secretsInKeyring
                        ? "in the desktop keyring (the access token in \(settings.home)/credentials.json)"
                        : "in \(settings.home)/credentials.json (0600)"
                ))
            if isDPoPBound(session.accessToken) {
                lines.append(("bound", "to this profile's key (\(settings.dpopKeys.location(for: session.key)))"))
            }
            for (label, value) in lines {
                Console.out(label + String(repeating: " ", count: max(1, 10 - label.count)) + value)
            }
        }

        /// One way in, as whoami lists it: `google (ada@example.com)`, `custom (ada@example.com, not confirmed)`.
        static func describe(_ identity: JSONValue) -> String {
            let provider = identity["provider"]?.stringValue ?? "?"
            var details: [String] = []
            if let email = identity["email"]?.stringValue {
                details.append(email)
            } else if let subject = identity["subject"]?.stringValue {
                details.append(subject)
            }
            if identity["email_verified"]?.boolValue == false { details.append("not confirmed") }
            return details.isEmpty ? provider : "\(provider) (\(details.joined(separator: ", ")))"
        }
    }
}
