import BrokerCore
import BrokerCrypto
package import HTTPTypes

/// `X-Request-Id`: taken from the request when it is 1–128 characters of letters, digits and `-_.:/+=@`,
/// else made here (16 random bytes, base64url: ``SecureRandom/identifier(byteCount:)``).
package enum RequestID {
    package static let field: HTTPField.Name = {
        guard let name = HTTPField.Name("X-Request-Id") else { preconditionFailure("X-Request-Id is a valid token") }
        return name
    }()

    package static func accepting(_ value: String?) -> String? {
        guard let value, (1...128).contains(value.utf8.count) else { return nil }
        let allowed = value.utf8.allSatisfy { byte in byte.isASCIIAlphanumeric || "-_.:/+=@".utf8.contains(byte) }
        return allowed ? value : nil
    }

    static func make() -> String { (try? SecureRandom.identifier(byteCount: 16)) ?? "unavailable" }
}
