import ArgumentParser
import BrokerClient
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
                Client credentials (a CI client registered with `broker client add`):
                  printf '%s' "$SECRET" | broker mint --client-id deploy --client-secret-stdin
                  BROKER_CLIENT_SECRET=... broker mint --client-id deploy --scope deploy --ttl 300
                Token exchange (RFC 8693), no stored secret: the CI platform's OIDC token from an issuer
                the client trusts:
                  broker mint --client-id deploy --subject-token-file "$RUNNER_TEMP/oidc.jwt"
                  broker mint --client-id deploy --subject-token-env BROKER_ID_TOKEN
                Offline: signs a JWT locally with a PEM private key (test fixtures).
                  broker mint --signing-key key.pem --subject ci:job-42 [--ttl 600] [--claim team=infra]
                  The key decides the algorithm: EC P-256 -> ES256, RSA >= 2048 -> RS256, Ed25519 -> EdDSA.
                Refused credentials exit 4 with the broker's reason on stderr and nothing on stdout.
                """
        )

        @Option(
            name: .customLong("client-id"),
            help: ArgumentHelp("The CI client to mint for (online forms).", valueName: "ID"))
        var clientID: String?

        @Flag(
            name: .customLong("client-secret-stdin"),
            help: "Read the client secret from stdin (else from BROKER_CLIENT_SECRET).")
        var clientSecretStdin = false

        @Option(
            name: .customLong("subject-token-file"),
            help: ArgumentHelp("Exchange the OIDC token in FILE (RFC 8693).", valueName: "FILE"))
        var subjectTokenFile: String?

        @Option(
            name: .customLong("subject-token-env"),
            help: ArgumentHelp("Exchange the OIDC token in environment variable VAR.", valueName: "VAR"))
        var subjectTokenEnv: String?

        @Option(name: .long, help: ArgumentHelp("The broker's URL (online forms; env BROKER_URL).", valueName: "URL"))
        var broker: String?

        @Option(
            name: .long,
            help: ArgumentHelp("A scope to ask for; repeatable (online forms).", valueName: "S"))
        var scope: [String] = []

        @Option(
            name: .long,
            help: ArgumentHelp(
                "PEM private key (PKCS#8, SEC 1 or PKCS#1) to sign with (offline form).", valueName: "FILE"))
        var signingKey: String?

        @Option(name: .long, help: "The token's subject (sub) (offline form).")
        var subject: String?

        @Option(name: .long, help: ArgumentHelp("The token's issuer (iss) (offline form).", valueName: "URL"))
        var issuer: String?

        @Option(name: .long, help: "The token's audience (aud) (default: the broker's, or broker offline).")
        var audience: String?

        @Option(
            name: .long,
            help: ArgumentHelp(
                "Lifetime in seconds (default 600; online capped by the broker's mint_max_ttl).", valueName: "SECONDS"))
        var ttl: Int?

        @Option(
            name: .customLong("claim"),
            help: ArgumentHelp(
                "An extra claim; V is JSON when it parses as JSON, else a string. Repeatable (offline form).",
                valueName: "K=V"))
        var claims: [String] = []

        @Option(name: .long, help: "Output: raw (the JWT), json, or header (Authorization: Bearer ...).")
        var format: TokenFormat = .raw

        static let registeredClaims: Set<String> = ["iss", "sub", "aud", "iat", "nbf", "exp", "jti"]
        static let maxTTL = 366 * 24 * 3600
        static let defaultTTL = 600

        func validate() throws {
            if let ttl, !(1...Mint.maxTTL).contains(ttl) {
                throw ValidationError("--ttl must be between 1 and \(Mint.maxTTL) seconds")
            }
            if signingKey != nil {
                let online = [
                    clientID.map { _ in "--client-id" }, clientSecretStdin ? "--client-secret-stdin" : nil,
                    subjectTokenFile.map { _ in "--subject-token-file" },
                    subjectTokenEnv.map { _ in "--subject-token-env" }, broker.map { _ in "--broker" },
                    scope.isEmpty ? nil : "--scope",
                ].compactMap { $0 }
                guard online.isEmpty else {
                    throw ValidationError(
                        "--signing-key mints offline; \(online.joined(separator: ", ")) belong to the online forms")
                }
                guard let subject, !subject.isEmpty else {
                    throw ValidationError("the offline form needs --subject SUB")
                }
                _ = try parsedClaims()
                return
            }
            guard let clientID, !clientID.isEmpty else {
                throw ValidationError(
                    "give --client-id ID (mint at the broker) or --signing-key FILE --subject SUB (offline)")
            }
            let offlineOnly = [
                subject.map { _ in "--subject" }, issuer.map { _ in "--issuer" }, claims.isEmpty ? nil : "--claim",
            ].compactMap { $0 }
            guard offlineOnly.isEmpty else {
                throw ValidationError(
                    "\(offlineOnly.joined(separator: ", ")) belong to the offline form (--signing-key)")
            }
            if subjectTokenFile != nil && subjectTokenEnv != nil {
                throw ValidationError("give --subject-token-file or --subject-token-env, not both")
            }
            if let subjectTokenEnv, subjectTokenEnv.isEmpty || subjectTokenEnv.contains("=") {
                throw ValidationError("--subject-token-env takes the name of an environment variable")
            }
            for item in scope where item.isEmpty || item.contains(where: { $0 == " " || $0 == "\"" || $0 == "\\" }) {
                throw ValidationError("--scope '\(item)' is not a scope token (no spaces, quotes or backslashes)")
            }
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
            guard let signingKey, let subject else { return try await mintOnline() }
            let ttl = self.ttl ?? Mint.defaultTTL
            let issuer = self.issuer ?? "http://127.0.0.1:8787"
            let audience = self.audience ?? "broker"
            let key: AsymmetricKey
            do {
                key = try SigningKeyFile.load(path: signingKey)
            } catch let error as SigningKeyFile.LoadError {
                throw CommandFailure(error.description)
            }
            let now = SystemClock().seconds()
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
                let output = TokenOutput(
                    accessToken: token, tokenType: "Bearer", expiresIn: Int64(ttl), expiresAt: now + Int64(ttl),
                    extra: [
                        "header": .object([
                            "alg": .string(key.algorithm.rawValue), "kid": .string(signer.kid), "typ": "JWT",
                        ]),
                        "claims": .object(claimSet),
                    ])
                Console.out(output.json.serialized())
            }
        }
    }
}
