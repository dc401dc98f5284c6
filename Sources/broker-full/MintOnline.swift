import ArgumentParser
import BrokerClient
import BrokerCore
import Glibc

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension Broker.Mint {
    /// The longest subject token read from a file or the environment (a CI platform's OIDC token is ~1 KiB).
    static let maxSubjectTokenBytes = 16 * 1024

    /// `client_credentials` or token exchange at the broker's `/auth/token`.
    func mintOnline() async throws {
        guard let clientID else { throw CommandFailure("--client-id is required", status: .usage) }
        let environment = ClientSettings.processEnvironment
        let settings: ClientSettings
        do {
            settings = try ClientSettings(broker: broker, profile: nil, environment: environment)
        } catch {
            throw CommandFailure(error.description, status: ExitStatus.of(error))
        }

        let subjectToken = try readSubjectToken(environment: environment)
        var secret: Secret?
        if clientSecretStdin {
            secret = try Terminal.readSecretFromStdin(what: "client secret")
        } else if let fromEnvironment = environment["BROKER_CLIENT_SECRET"], !fromEnvironment.isEmpty {
            secret = Secret(fromEnvironment)
        }
        if subjectToken == nil && secret == nil {
            throw CommandFailure(
                "client_credentials needs the client's secret",
                hint:
                    "pipe it in: printf '%s' \"$SECRET\" | broker mint --client-id \(clientID) --client-secret-stdin, "
                    + "or set BROKER_CLIENT_SECRET",
                status: .usage)
        }

        // A CI token goes to a job on another machine: it is not bound to this profile's DPoP key (the job could
        // never prove it).
        var api = settings.api
        api.proofKey = nil
        let minted: MintedToken
        do {
            minted = try await api.mint(
                clientID: clientID,
                secret: secret,
                subjectToken: subjectToken,
                audience: audience,
                scope: scope.isEmpty ? nil : scope.joined(separator: " "),
                ttl: ttl.map(Int64.init)
            )
        } catch {
            if case .rejected(_, let code, let description) = error, error.refusesCredentials {
                throw CommandFailure(
                    "the broker refused to mint a token: \(description.isEmpty ? code.rawValue : description)",
                    status: ExitStatus.of(error))
            }
            throw ClientFailure.exit(error, doing: "minting")
        }

        let token = minted.accessToken.exposed
        switch format {
        case .raw: Console.out(token)
        case .header: Console.out("Authorization: Bearer \(token)")
        case .json:
            Console.out(TokenOutput(minted.response, receivedAt: SystemClock().seconds()).json.serialized())
        }
    }

    /// The subject token from `--subject-token-file` or `--subject-token-env`, trimmed; `nil` when neither
    /// is given. A missing or empty source is an error that names it.
    func readSubjectToken(environment: [String: String]) throws -> Secret? {
        let text: String
        if let path = subjectTokenFile {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                throw CommandFailure("cannot read the subject token file \(path): \(String(cString: strerror(errno)))")
            }
            defer { close(fd) }
            var bytes = [UInt8]()
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count < 0 {
                    if errno == EINTR { continue }
                    throw CommandFailure(
                        "cannot read the subject token file \(path): \(String(cString: strerror(errno)))")
                }
                if count == 0 { break }
                bytes.append(contentsOf: buffer[..<count])
                guard bytes.count <= Self.maxSubjectTokenBytes else {
                    throw CommandFailure(
                        "the subject token file \(path) is larger than \(Self.maxSubjectTokenBytes) bytes")
                }
            }
            guard let decoded = String(validating: bytes, as: UTF8.self) else {
                throw CommandFailure("the subject token file \(path) is not text")
            }
            text = decoded
            if text.trimmingSpaces.isEmpty { throw CommandFailure("the subject token file \(path) is empty") }
        } else if let name = subjectTokenEnv {
            guard let value = environment[name], !value.trimmingSpaces.isEmpty else {
                throw CommandFailure("the environment variable \(name) holds no subject token")
            }
            guard value.utf8.count <= Self.maxSubjectTokenBytes else {
                throw CommandFailure("the subject token in \(name) is larger than \(Self.maxSubjectTokenBytes) bytes")
            }
            text = value
        } else {
            return nil
        }
        return Secret(text.trimmingSpaces)
    }
}

extension String {
    /// Without leading and trailing spaces, tabs and line breaks.
    fileprivate var trimmingSpaces: String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}
