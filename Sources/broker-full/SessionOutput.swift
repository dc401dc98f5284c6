import ArgumentParser
import BrokerClient
import BrokerCore
import BrokerProviderSchemas
import Glibc
import ProviderSupport

/// `broker token --format`.
enum SessionTokenFormat: String, ExpressibleByArgument, CaseIterable {
    case raw
    case header
    case json
    case execCredential = "exec-credential"

    func render(_ session: Session, now: Int64) -> String {
        switch self {
        case .raw:
            return session.accessToken.exposed
        case .header:
            return "Authorization: Bearer " + session.accessToken.exposed
        case .json:
            let output = TokenOutput(
                userID: session.userID, provider: session.provider, accessToken: session.accessToken.exposed,
                tokenType: "Bearer", expiresIn: max(0, session.remaining(at: now)), expiresAt: session.expiresAt,
                extra: ["broker": .string(session.key.brokerURL), "profile": .string(session.key.profile)])
            return output.json.serialized()
        case .execCredential:
            // client.authentication.k8s.io/v1 ExecCredential: kubectl caches the token until the timestamp.
            let document: JSONValue = [
                "apiVersion": "client.authentication.k8s.io/v1",
                "kind": "ExecCredential",
                "spec": [:],
                "status": [
                    "token": .string(session.accessToken.exposed),
                    "expirationTimestamp": .string(RFC3339.format(epochSeconds: session.expiresAt)),
                ],
            ]
            return document.serialized()
        }
    }
}

/// "expires in 54 min" for people.
enum Expiry {
    static func describe(_ expiresAt: Int64, now: Int64) -> String {
        let left = expiresAt - now
        let stamp = RFC3339.format(epochSeconds: expiresAt)
        if left <= 0 { return "expired \(span(-left)) ago (\(stamp))" }
        return "in \(span(left)) (\(stamp))"
    }

    static func span(_ seconds: Int64) -> String {
        if seconds < 60 { return "\(seconds) s" }
        if seconds < 3600 { return "\(seconds / 60) min" }
        if seconds < 86_400 { return "\(seconds / 3600) h \(seconds % 3600 / 60) min" }
        return "\(seconds / 86_400) d \(seconds % 86_400 / 3600) h"
    }
}
