import ArgumentParser
import BrokerCore
import BrokerCrypto
import BrokerServer

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension Broker {
    struct Mint: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Mint a short-lived token for CI jobs and test fixtures.",
            discussion: """
                Offline form: signs a JWT locally with a PEM private key.
                  broker mint --signing-key key.pem --subject ci:job-42 [--ttl 600] [--claim team=infra]
                The key decides the algorithm: EC P-256 -> ES256, RSA >= 2048 -> RS256, Ed25519 -> EdDSA.
                """
        )

        @Option(
            name: .long,
            help: ArgumentHelp("PEM private key (PKCS#8, SEC 1 or PKCS#1) to sign with.", valueName: "FILE"))
        var signingKey: String

        @Option(name: .long, help: "The token's subject (sub).")
        var subject: String

        @Option(name: .long, help: ArgumentHelp("The token's issuer (iss).", valueName: "URL"))
        var issuer = "http://127.0.0.1:8787"

        @Option(name: .long, help: "The token's audience (aud).")
        var audience = "broker"

        @Option(name: .long, help: ArgumentHelp("Lifetime in seconds.", valueName: "SECONDS"))
        var ttl = 600

        @Option(
            name: .customLong("claim"),
            help: ArgumentHelp(
                "An extra claim; V is JSON when it parses as JSON, else a string. Repeatable.", valueName: "K=V"))
        var claims: [String] = []

        @Option(name: .long, help: "Output: raw (the JWT), json, or header (Authorization: Bearer ...).")
        var format: TokenFormat = .raw

        static let registeredClaims: Set<String> = ["iss", "sub", "aud", "iat", "nbf", "exp", "jti"]
        static let maxTTL = 366 * 24 * 3600

        func validate() throws {
            guard !subject.isEmpty else { throw ValidationError("--subject must not be empty") }
            guard (1...Mint.maxTTL).contains(ttl) else {
                throw ValidationError("--ttl must be between 1 and \(Mint.maxTTL) seconds")
            }
            _ = try parsedClaims()
        }

        func parsedClaims() throws -> [String: JSONValue] {
            var result: [String: JSONValue] = [:]
            for item in claims {
                guard let equals = item.firstIndex(of: "="), equals != item.startIndex else {
                    throw ValidationError("--claim expects K=V, got '\(item)'")
                }
                let name = String(item[..<equals])
                let text = String(item[item.index(after: equals)...])
                guard !Mint.registeredClaims.contains(name) else {
                    throw ValidationError("--claim cannot set \(name): use the dedicated option")
                }
                result[name] = JSONValue.parse(Array(text.utf8)) ?? .string(text)
            }
            return result
        }

        func run() async throws {
            let key: AsymmetricKey
            do {
                key = try SigningKeyFile.load(path: signingKey)
            } catch let error as SigningKeyFile.LoadError {
                throw Console.fail(error.description)
            }
            let now = Int64(Date().timeIntervalSince1970)
            var claimSet = try parsedClaims()
            claimSet["iss"] = .string(issuer)
            claimSet["sub"] = .string(subject)
            claimSet["aud"] = .string(audience)
            claimSet["iat"] = .int(now)
            claimSet["nbf"] = .int(now)
            claimSet["exp"] = .int(now + Int64(ttl))
            claimSet["jti"] = .string(try SecureRandom.token(byteCount: 16))
            let signer = try JWTSigner(key: key)
            let token = try signer.sign(claims: claimSet, type: "JWT")
            switch format {
            case .raw:
                Console.out(token)
            case .header:
                Console.out("Authorization: Bearer \(token)")
            case .json:
                let document: JSONValue = .object([
                    "access_token": .string(token),
                    "token_type": "Bearer",
                    "expires_in": .int(Int64(ttl)),
                    "expires_at": .int(now + Int64(ttl)),
                    "header": .object([
                        "alg": .string(key.algorithm.rawValue), "kid": .string(signer.kid), "typ": "JWT",
                    ]),
                    "claims": .object(claimSet),
                ])
                Console.out(document.serialized())
            }
        }
    }
}
